"""The wire: frames and connections, one schema per control message, the dtype vocabulary."""
