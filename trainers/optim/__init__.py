"""Optimizers the services run that torch does not ship (trainers/optim/lordo.py: LoRDO's low-rank Adam)."""
