"""Consistency: do the workers hold the learner's state? The learner's side of the hash checks.

The learner records its own hashes at the versions that are checked (every K versions, the
last one, and the version a worker joins at); each worker reports its hashes in a HASH frame
after applying those versions, and each report is compared with the learner's record of the
same version. What is compared:
- replay methods: the policy (adapter) hash and the optimizer hash;
- `full`: the policy hash (the shipped fp32 adapter is the learner's own);
- `full-bf16` and `rank-R` (bf16 too): the hash of the adapter rounded to the ship dtype, which is
  what workers sample with (version 0 excepted: every replica builds it from the seed, nothing is
  shipped).
A run is consistent when it completed, no comparison failed, and every replica that reported
the final version agrees with the learner there.
"""
from __future__ import annotations

import torch

from trainers.events import EventLog
from trainers.hilo.methods import Method
from trainers.model.replica import Replica
from trainers.hilo.stack import shipped_policy_hash
from trainers.process import log


class Consistency:
    """The learner's hashes by version, the workers' reports, and the verdict."""

    def __init__(self, replica: Replica, method: Method, events: EventLog):
        self.replica, self.method, self.events = replica, method, events
        self.hashes: dict[int, tuple[str, str | None]] = {}  # version -> (policy, optimizer) of the learner
        self.reports: dict[str, dict] = {}  # replica name -> its latest checked report
        self.checks: list[dict] = []
        self.consistent = True  # no comparison has failed so far
        self.record(0)

    def record(self, version: int) -> None:
        """Hash the learner's replica, which is at `version` now."""
        r, m = self.replica, self.method
        if m.replay:
            self.hashes[version] = (r.policy_hash(), r.optimizer_hash())
        elif m.ship_dtype == torch.float32 or version == 0:
            self.hashes[version] = (r.policy_hash(), None)
        else:
            self.hashes[version] = (shipped_policy_hash(r.adapter(), m.ship_dtype), None)

    def learner_hash(self, version: int) -> str | None:
        """The learner's policy hash at `version`, if recorded."""
        return self.hashes.get(version, (None,))[0]

    def check(self, replica: str, report: dict) -> None:
        """Compare a worker's HASH report with the learner's record of that version."""
        version = report.get("version")
        if version not in self.hashes:
            self.events.write("hash_unchecked", replica=replica, report=report)
            return
        policy, optimizer = self.hashes[version]
        ok = report.get("policy_hash") == policy and (optimizer is None or report.get("optimizer_hash") == optimizer)
        check = {"replica": replica, "version": version, "equal": ok, "policy_hash": report.get("policy_hash"),
                 "optimizer_hash": report.get("optimizer_hash"), "learner_policy_hash": policy,
                 "learner_optimizer_hash": optimizer}
        self.checks.append(check)
        self.reports[replica] = report
        self.events.write("hash", **check)
        if not ok:
            self.consistent = False
            log("learner", f"HASH MISMATCH: {replica} at version {version}: {report} vs learner {policy} {optimizer}")

    def reported(self, replica: str, version: int) -> bool:
        """Has `replica`'s latest checked report this version?"""
        return self.reports.get(replica, {}).get("version") == version

    def summary(self, complete: bool) -> dict:
        """The hash part of summary.json, at the learner's current version."""
        final = self.replica.version
        policy, optimizer = self.hashes.get(final, (None, None))
        state_hashes, optimizer_hashes = {"learner": policy}, {"learner": optimizer}
        for name, report in sorted(self.reports.items()):
            if report.get("version") == final:
                state_hashes[name] = report.get("policy_hash")
                optimizer_hashes[name] = report.get("optimizer_hash")
        optims = set(optimizer_hashes.values()) if self.method.replay else {None}
        agree = len(set(state_hashes.values())) == 1 and len(optims) == 1 and len(state_hashes) > 1
        return {"state_hashes": state_hashes,
                "optimizer_hashes": optimizer_hashes if self.method.replay else None,
                "consistent": bool(complete and self.consistent and agree),
                "hash_checks": len(self.checks), "hash_mismatches": [c for c in self.checks if not c["equal"]]}
