"""The HiLo services: the learner and its workers (membership, consistency, held-out evaluation), the
method stack (name -> protocol + compressor) and the one build of a process's training stack."""
