"""What runs inside the learner and worker services: models, LoRA, compressors, replay, wire format."""
