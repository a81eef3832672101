"""Model building: tiny and named model shapes with PEFT LoRA, the byte tokenizer, rollouts, the replica
(adapter + optimizer state, bit-exact replay), and the pre-trained base and teacher a run loads."""
