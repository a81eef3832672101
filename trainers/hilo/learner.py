"""The learner service: collects rollouts, trains, encodes, steps itself, ships the update.

    RUN_TOKEN=... python -m trainers.hilo.learner --listen 0.0.0.0:29500 --run-dir results/run1 \
        --workers 8 --method spar --budget 1.6% --model micro --updates 20 --pipeline 1

Per update t (ALGORITHMS.md section 1):
    collect batch t from every member worker (in worker order, whatever order they arrive in)
    G = gradient of the objective on the batch                   (exact)
    replay methods: msg = encode(G); step on decode(msg)         (never on G)
    full methods:   step on G; msg = the adapter in the ship dtype
    log msg, snapshot every S versions, hash every K versions, send msg to every member

Snapshots: every S versions the learner keeps the replica's snapshot (adapter, AdamW state,
version) for workers that join late, and writes its own to `<run dir>/learner-snapshot.safetensors`
(atomically): the same plus its compressor's state (error-feedback residual, warm starts, random
generators: `Compressor.state_dict`), the policies kept for the held-out evaluation and the run's
parameters. `--resume FILE` starts a learner from that file: it must be given the same run
parameters, and it continues at the snapshot's version bit-identically (the rollouts for batch t
are a function of the policy at version t - D and the seed (seed, worker, t), so rollouts sampled
again after a restart are the ones the stopped learner trained on; at D = 1 a worker that rejoins
samples its first batch one version newer, as any joiner does).

This file is the loop and the training state. Who takes part (connections, joins and catch-up,
disconnects, drops, sends) is `trainers/hilo/membership.py`; the hash checks and the consistency
verdict are `trainers/hilo/consistency.py`. One event-loop thread serves every connection
(`trainers/hilo/links.py`: it only validates frames, queues them and writes what is sent): the main
thread owns all state and acts on what arrived in `pump`. A joiner's catch-up, like every broadcast,
is queued on its connection's output queue and written by the loop: a slow or stuck joiner's send
holds up no update (its rollouts are waited for as any member's, unless --quorum).
"""
from __future__ import annotations

import gc

if __name__ == "__main__":   # exec'd (python -m): the imports go without the collector (trainers.process.imports_done)
    gc.disable()

import json
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from trainers.protocol import messages, wire
from trainers.hilo.consistency import Consistency
from trainers.events import (EventLog, PhaseTimer, Tally, atomic_write_bytes, atomic_write_text, median, read_events,
                             superseded_dropped, write_summary)
from trainers.hilo.membership import (LIVENESS_S, MAX_PENDING_CONNECTIONS, MAX_PENDING_PER_SOURCE, TOKEN_TIMEOUT_S,
                                      Membership, Peer, ReplayLog)
from trainers.compress import PayloadError
from trainers.model.models import lora_gradients
from trainers.model.rollout import Rollouts, concat
from trainers.hilo import stack
from trainers.hilo.evaluate import evaluate
from trainers.model.models import lora_parameters
from trainers.model.replica import OptimConfig, read_snapshot, snapshot_step
from trainers.objectives import get_objective, parse_objective_options
from trainers.process import die_with_parent, imports_done, log, set_threads
from trainers import cards, service_args
from trainers.tasks.heldout import EVAL_SAMPLING_SEED, heldout_problems
from trainers.spec import RunParams
from trainers.protocol.wire import MessageType, WireError

PROCESS = "learner"
SNAPSHOT_FILE = "learner-snapshot.safetensors"  # in the run folder; what --resume reads
UNCHECKED_INTERVAL_S = 10.0  # at most one `hash_unchecked` row per member per this many seconds


class Interrupted(BaseException):
    """SIGTERM/SIGINT: stop, write an incomplete summary, let the workers go. A BaseException (like
    KeyboardInterrupt), so that the `except Exception` that keeps one bad peer from stopping the
    learner never swallows it."""


class Learner:
    """`built`: the stack of `params` (`stack.build(params, teacher=True)`, as `main` builds it once);
    None builds it here."""

    def __init__(self, params: RunParams, token: str, run_dir: str, listen: tuple[str, int],
                 worker_timeout_s: float = 120.0, join_timeout_s: float = 300.0,
                 handshake_timeout_s: float = 10.0, max_frame_bytes: int = 64 * 2**20,
                 max_pending_connections: int = MAX_PENDING_CONNECTIONS,
                 max_pending_per_source: int = MAX_PENDING_PER_SOURCE, token_timeout_s: float = TOKEN_TIMEOUT_S,
                 liveness_s: float = LIVENESS_S, built: stack.Stack | None = None):
        self.params, self.run_dir = params, run_dir
        self.worker_timeout_s, self.join_timeout_s = worker_timeout_s, join_timeout_s
        built = built or stack.build(params, teacher=True)  # task, tokenizer, method, models: once per process
        self.task, self.tokenizer, self.method = built.task, built.tokenizer, built.method
        self.model, self.replica = built.model, built.replica
        self.compressor = self.method.make_compressor() if self.method.replay else None
        self.delta = self.method.make_delta(self.replica.adapter()) if self.method.delta else None
        self.objective = build_objective(params.objective, built.teacher, params.objective_options)
        self.vocab = self.model.get_input_embeddings().num_embeddings
        self.events = EventLog(run_dir, PROCESS)
        self.counter = wire.ByteCounter()
        self.replay_log = ReplayLog(self.replica.snapshot())
        self.consistency = Consistency(self.replica, self.method, self.events)
        self.unchecked = Tally(self.events, "hash_unchecked", UNCHECKED_INTERVAL_S)  # reports of unrecorded versions
        self.members = Membership(params, self.method, token, listen, self.replica, self.replay_log,
                                  self.consistency, self.events, self.counter, handshake_timeout_s, max_frame_bytes,
                                  max_pending_connections, send_timeout_s=worker_timeout_s,
                                  per_source=max_pending_per_source, token_timeout_s=token_timeout_s,
                                  liveness_s=liveness_s)
        self.address = self.members.address
        self.rows: list[dict] = []  # the update rows written so far
        self.policies: list[tuple[int, dict]] = []  # (version, the policy the workers sample) to evaluate
        self.evals: list[dict] = []  # held-out evaluation rows, written after the loop
        self.parse_seconds = 0.0  # validating rollout bodies (tensor tables, offsets)
        self.left_out: list[int] = []  # members whose rollouts the last update went without (--quorum)

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict:
        p = self.params
        self.write_summary(complete=False, status="running")
        self.members.listen()
        self.events.write("start", params=p.to_json(), address=list(self.address))
        log(PROCESS, f"listening on {self.address[0]}:{self.address[1]}, method {p.method}, {p.workers} workers")
        self.wait_for_workers()
        self.keep_policy(self.replica.version)  # 0; or where a resumed learner starts
        last_done, last_harness = time.monotonic(), self.harness_seconds()
        for t in range(self.replica.version, p.updates):
            timer = PhaseTimer()
            with timer.phase("idle"):  # waiting for rollouts: the learner's share of the critical path
                batch = self.collect(t)
            before = self.counter.by_type()
            msg, info = self.train_step(batch, timer)
            version = self.replica.version
            self.replay_log.append(version, self.catch_up_message(msg))
            with timer.phase("hash"):
                if version % p.hash_every == 0 or version == p.updates:
                    self.consistency.record(version)
                if version % p.snapshot_every == 0:
                    self.replay_log.snapshot(version, self.replica.snapshot())
                    atomic_write_bytes(Path(self.run_dir) / SNAPSHOT_FILE, self.learner_snapshot())
            with timer.phase("send_update"):
                written = self.members.broadcast(msg, version)
            done = time.monotonic()
            # The harness's own work this update: framing + checksums, parsing rollouts, hashing,
            # snapshots, and writing the previous row; what the method's time must not include.
            now_harness = self.harness_seconds()  # this row's own write is charged to the next row
            harness = now_harness - last_harness + timer.durations.get("hash", 0.0)
            self.rows.append(self.events.write(
                "update", version=version, batch=t, **timer.row(), **info,
                seconds_per_update=round(done - last_done, 6), update_payload_bytes=len(msg),
                update_frame_bytes=written, workers=sorted(written),
                bytes=bytes_delta(before, self.counter.by_type()),
                rollout_arrival={f"w{w}": round(at, 6) for w, _, at in batch},
                left_out=[f"w{w}" for w in self.left_out],
                hash=self.consistency.learner_hash(version), harness_s=round(harness, 6), tcp=self.tcp_delta()))
            # A copy of the policy to evaluate later; its time is moved out of the next update's.
            last_done, last_harness = done + self.keep_policy(version), now_harness
            self.pump(0)
        self.finish()
        self.members.close_connections()  # nothing is read (or held) while the held-out evaluation runs
        self.evaluate()
        return self.write_summary(complete=True, status="complete")

    # ------------------------------------------------------------------ the phases

    def wait_for_workers(self) -> None:
        """Before the first update: wait (bounded) until every configured worker has joined."""
        end = time.monotonic() + self.join_timeout_s
        while len(self.members.peers) < self.params.workers and time.monotonic() < end:
            self.pump(0.1)
        if not self.members.peers:
            raise RuntimeError(f"no worker joined within {self.join_timeout_s} s")
        missing = sorted(set(range(1, self.params.workers + 1)) - set(self.members.peers))
        if missing:
            self.events.write("join_timeout", missing=missing)

    def collect(self, batch: int) -> list[tuple[int, Rollouts, float]]:
        """Batch `batch` from every member, in worker order; members that do not answer are dropped
        (a stall). With --quorum K: as soon as K members' rollouts are in, with every member's that
        arrived by then; the others' rollouts for this batch arrive late and are dropped
        (`stale_rollouts`, with their staleness); a member is dropped only when fewer than K came
        within --worker-timeout."""
        start = time.monotonic()
        while True:
            members = self.members.contributors(batch)
            missing = [p.worker for p in members if batch not in p.rollouts]
            need = min(self.params.quorum or len(members), len(members))
            if members and len(members) - len(missing) >= need:
                self.left_out = missing
                return [(p.worker, *p.rollouts.pop(batch)) for p in members if p.worker not in missing]
            if time.monotonic() - start > self.worker_timeout_s:
                for w in missing:
                    self.members.drop(w, f"no rollouts for batch {batch} within {self.worker_timeout_s} s", stall=True)
                if not self.members.peers:
                    raise RuntimeError(f"no worker left at batch {batch}")
                start = time.monotonic()  # the rest get a fresh timeout
            self.pump(0.05)

    def train_step(self, batch: list[tuple[int, Rollouts, float]], timer: PhaseTimer) -> tuple[bytes, dict]:
        """One update from one batch; returns (the update message, metrics)."""
        parts = [r for _, r, _ in batch]
        versions = [r.policy_version for r in parts]
        # concat wants one policy version per batch; a late joiner's rows may be one version newer.
        rollouts = concat([Rollouts(**{**vars(r), "policy_version": min(versions)}) for r in parts])
        with timer.phase("train"):
            self.model.zero_grad(set_to_none=True)
            loss, metrics = self.objective.loss(self.model, rollouts)
            loss.backward()
            grads = lora_gradients(self.model)
        shipped: dict = {}  # encode_adapter's figures (full sync only): a replay method ships no adapter
        if self.method.replay:
            with timer.phase("encode"):
                msg = self.compressor.encode(grads)
            with timer.phase("decode_replay"):
                try:
                    decoded = self.compressor.decode(msg, reuse=True)
                except PayloadError as err:   # never stepped on nor sent: the run stops, saying why
                    raise RuntimeError(f"update {self.replica.version + 1} refused: {err}") from None
                self.replica.step(decoded)  # stepped from at once: one kept buffer
        else:
            with timer.phase("decode_replay"):
                self.replica.step(grads)
            with timer.phase("encode"):
                msg, shipped = self.encode_adapter()
        rewards = rollouts.rewards
        info = {**shipped, "loss": float(loss.detach()), "reward_mean": sum(rewards) / len(rewards),
                "rows": len(rollouts), "metrics": metrics,
                "policy_versions": {f"w{w}": r.policy_version for w, r, _ in batch},
                # versions each contribution's policy was behind the one this update starts from
                "staleness": {f"w{w}": self.replica.version - 1 - r.policy_version for w, r, _ in batch},
                "lag": self.replica.version - 1 - min(versions)}
        return msg, info

    def encode_adapter(self) -> tuple[bytes, dict]:
        """Full protocol: the adapter in the ship dtype, whole (full, full-bf16, rank-R) or as the
        elements that changed since the last shipped version (delta: its density, changed / total,
        goes in the update row)."""
        if self.delta is None:
            adapter = {n: t.to(self.method.ship_dtype) for n, t in self.replica.adapter().items()}
            return wire.pack_tensors(adapter, meta={"version": self.replica.version}), {}
        msg, changed = self.delta.encode(self.replica.adapter(), self.replica.version)
        return msg, {"delta_changed": changed, "delta_density": changed / self.delta.reference.numel()}

    def catch_up_message(self, msg: bytes) -> bytes:
        """What the replay log keeps for a late joiner at this version: the update itself, except
        under delta, whose update means something only on top of the previous version: there the
        whole shipped adapter (a keyframe, full-bf16's message; the copy is the price of joins)."""
        if self.delta is None:
            return msg
        return wire.pack_tensors(self.delta.tensors(), meta={"version": self.replica.version})

    # ------------------------------------------------------------------ snapshots and resuming

    def learner_snapshot(self) -> bytes:
        """Everything the learner's next updates depend on (the module doc): the replica's snapshot
        with the compressor's state, the kept policies and the run's parameters in it."""
        extra = {f"compressor/{k}": t for k, t in (self.compressor.state_dict() if self.compressor else {}).items()}
        for version, adapter in self.policies:
            extra.update({f"policy/{version:08d}/{n}": t for n, t in adapter.items()})
        return self.replica.snapshot(extra=extra, meta={"params": params_json(self.params)})

    def resume(self, blob: bytes) -> None:
        """Continue from a `learner_snapshot` of this run (before `run`): replica, compressor state,
        kept policies; the delta tracker and the replay log start again at the snapshot's version."""
        check_resume(blob, self.params)
        extra = self.replica.restore(blob)
        if self.compressor is not None:
            self.compressor.load_state_dict({k[len("compressor/"):]: t for k, t in extra.items()
                                             if k.startswith("compressor/")})
        self.policies = kept_policies(extra)
        version = self.replica.version
        if self.delta is not None:  # what the stopped learner shipped last: the adapter at `version`, rounded
            self.delta.reset(self.replica.adapter(), version)
        self.replay_log = self.members.replay_log = ReplayLog(self.replica.snapshot(), version)
        if not self.method.replay:  # full sync catches a joiner up from the newest shipped adapter
            self.replay_log.append(version, self.catch_up_message(self.encode_adapter()[0] if self.delta is None
                                                                  else b""))
        # summary.json's medians cover the whole run: the earlier life's update rows up to the snapshot
        self.rows = [r for r in superseded_dropped(read_events(self.events.path))
                     if r.get("kind") == "update" and isinstance(r.get("version"), int) and r["version"] <= version]
        self.events.write("resumed", version=version, policies=[v for v, _ in self.policies])
        log(PROCESS, f"resumed at version {version}")

    # ------------------------------------------------------------------ held-out quality

    def keep_policy(self, version: int) -> float:
        """Keep a copy of the policy at the versions the run evaluates (0, every E, the last);
        returns the seconds it took. It is the policy the workers sample with: the bf16-rounded
        adapter under full-bf16."""
        p, t0 = self.params, time.perf_counter()
        if not p.eval_problems:
            return 0.0
        if version in (0, p.updates) or (p.eval_every and version % p.eval_every == 0):
            dtype = self.method.ship_dtype if not self.method.replay else None
            adapter = self.replica.adapter()
            if dtype is not None:
                adapter = {n: t.to(dtype).to(t.dtype) for n, t in adapter.items()}
            self.policies.append((version, adapter))
        return time.perf_counter() - t0

    def evaluate(self) -> None:
        """After the loop (the workers have stopped, so nothing here is in seconds per update):
        every kept policy on the same held-out problems with the same sampling seed (common random
        numbers across methods and run seeds: heldout.EVAL_SAMPLING_SEED), one `eval` event each."""
        p = self.params
        if not self.policies:
            return
        task = self.task
        problems = heldout_problems(task, p.eval_problems)
        teacher = getattr(self.objective, "teacher", None)
        metric = cards.objective(p.objective).heldout_metric   # the objective's own held-out figure
        lora = lora_parameters(self.model)
        for version, adapter in self.policies:
            t0 = time.perf_counter()
            with torch.no_grad():
                for name, param in lora.items():
                    param.copy_(adapter[name])
            r = evaluate(self.model, self.tokenizer, task, problems, n=p.eval_samples, k=p.pass_k,
                         max_new_tokens=p.max_new_tokens, temperature=p.temperature, seed=EVAL_SAMPLING_SEED,
                         teacher=teacher)
            self.evals.append(self.events.write(
                "eval", version=version, pass_at_1=r.pass_at_1, pass_at_k=r.pass_at_k, k=r.k, n=r.n,
                problems=r.num_problems, mean_reward=r.mean_reward, reverse_kl=r.reverse_kl, gold_prob=r.gold_prob,
                objective_metric=metric, objective=getattr(r, metric), eval_s=round(time.perf_counter() - t0, 6)))
        self.policies.clear()

    def finish(self) -> None:
        """Wait (bounded) for every member's final hash, then tell everyone to stop."""
        final = self.replica.version
        end = time.monotonic() + self.worker_timeout_s
        while time.monotonic() < end:
            if all(self.consistency.reported(p.name, final) for p in self.members.peers.values()):
                break
            self.pump(0.05)
        else:
            for p in list(self.members.peers.values()):
                if not self.consistency.reported(p.name, final):
                    self.members.drop(p.worker, f"no final hash within {self.worker_timeout_s} s", stall=True)
        self.members.stop_all("complete")

    # ------------------------------------------------------------------ what the workers send

    def pump(self, timeout: float) -> None:
        """Act on what arrived within `timeout` s: joins and departures, rollouts, hash reports.
        Whatever a member's frame makes go wrong drops that member; the learner goes on."""
        self.unchecked.flush()
        for peer, frame in self.members.pump(timeout):
            try:
                self.on_frame(peer, frame)
            except (WireError, ValueError) as e:  # a frame that breaks the protocol
                self.members.drop(peer.worker, f"bad {frame.type.name} frame: {e}")
            except Exception as e:  # nobody foresaw it: log it in full, drop the peer, keep running
                log(PROCESS, f"{type(e).__name__} while handling {frame.type.name} from {peer.name}: {e}\n"
                             f"{traceback.format_exc()}")
                self.members.drop(peer.worker, f"{type(e).__name__} while handling its {frame.type.name} frame: {e}")

    def on_frame(self, peer: Peer, frame: wire.Frame) -> None:
        """A member's frame: rollouts for a coming batch (validated before they are kept), or a hash report.
        Every JSON part passes its schema (`trainers.protocol.messages`) before it is used."""
        if frame.type == MessageType.HASH:
            return self.on_hash(peer, messages.decode(MessageType.HASH, frame.body))
        if frame.type != MessageType.ROLLOUTS:
            raise WireError(f"unexpected {frame.type.name} from a worker")
        t0 = time.perf_counter()
        tensors, meta = wire.unpack_tensors(frame.body)
        meta = messages.check_meta(MessageType.ROLLOUTS, meta)
        batch, version = meta["batch"], self.replica.version
        if meta.get("worker", peer.worker) != peer.worker:
            raise WireError(f"rollouts from {peer.name} say they are from worker {meta['worker']}")
        if not 0 <= batch < self.params.updates:
            raise WireError(f"rollouts for batch {batch} outside 0..{self.params.updates - 1}")
        if batch < version:  # the update went on without it (--quorum) or it rejoined: dropped, never used later
            self.events.write("stale_rollouts", worker=peer.worker, batch=batch, version=version,
                              staleness=version - batch)
            return
        if batch > version + self.params.pipeline + 1 or batch in peer.rollouts:
            raise WireError(f"rollouts for batch {batch} while at version {version}")
        rollouts = Rollouts.from_tensors(tensors)
        self.check_rollouts(rollouts)
        peer.rollouts[batch] = (rollouts, time.monotonic())
        self.parse_seconds += time.perf_counter() - t0

    def on_hash(self, peer: Peer, report: dict) -> None:
        """A member's hash report. The live window is the member's catch-up base (the snapshot it
        started from; it reports while it replays) up to the learner's version, in order (a repeat
        of the newest is counted, not checked again): a report outside it is a protocol error (the member
        is dropped), so a token holder cannot grow the event file with reports. One inside it that
        the learner did not record is counted in `unchecked` (one row per member per interval)."""
        version = report["version"]
        if not peer.hash_reported <= version <= self.replica.version:
            raise WireError(f"HASH for version {version} outside the live window "
                            f"{max(peer.hash_reported, 0)}..{self.replica.version}")
        if version == peer.hash_reported:  # a worker reports its join version twice (replayed, then caught up)
            self.unchecked.add(peer.name, reason="a repeated report of the version last checked", version=version)
            return
        peer.hash_reported = version
        if version not in self.consistency.hashes:
            self.unchecked.add(peer.name, reason="no learner hash recorded at that version", version=version)
            return
        self.consistency.check(peer.name, report)

    def check_rollouts(self, rollouts: Rollouts) -> None:
        """What the training step relies on, checked against the run's parameters: token ids in
        the vocabulary, no more rows or completion tokens than the run samples, the run's
        temperature (concat refuses mixed ones), a policy version the learner has produced."""
        p = self.params
        ids = [t for row in rollouts.prompt_ids + rollouts.completion_ids for t in row]
        if ids and not 0 <= min(ids) <= max(ids) < self.vocab:
            raise WireError(f"rollouts hold token ids outside the vocabulary 0..{self.vocab - 1}")
        most = p.problems_per_worker * p.samples_per_problem
        if not 0 < len(rollouts) <= most:
            raise WireError(f"{len(rollouts)} rollout rows, expected 1..{most}")
        if max(len(c) for c in rollouts.completion_ids) > p.max_new_tokens:
            raise WireError(f"a completion longer than max_new_tokens={p.max_new_tokens}")
        if rollouts.temperature != p.temperature:
            raise WireError(f"rollouts sampled at temperature {rollouts.temperature}, the run's is {p.temperature}")
        if not 0 <= rollouts.policy_version <= self.replica.version:
            raise WireError(f"rollouts from policy version {rollouts.policy_version}, "
                            f"the learner is at {self.replica.version}")

    # ------------------------------------------------------------------ metrics

    def tcp_delta(self) -> dict:
        """The members' sockets since the previous update row, summed (TCP_INFO: bytes sent incl.
        retransmissions, retransmitted bytes and segments, bytes received; the byte ledger)."""
        return wire.sum_counts([p.conn.tcp_delta() for p in list(self.members.peers.values()) if p.conn is not None])

    def harness_seconds(self) -> float:
        """Cumulative seconds of harness work outside the phase timers (framing, parsing, logging)."""
        return self.counter.seconds + self.parse_seconds + self.events.seconds

    def write_summary(self, complete: bool, status: str) -> dict:
        p = self.params
        summary = {"complete": complete, "status": status, "method": p.method, "protocol": self.method.protocol,
                   "workers": p.workers, "params": p.to_json(),
                   # the last update logged (sent): a learner stopped between stepping its replica and
                   # logging that version has not done it, whatever the replica's own count says
                   "updates": self.rows[-1]["version"] if self.rows else self.replica.version,
                   "updates_planned": p.updates, **update_stats(self.rows), **self.consistency.summary(complete),
                   "dropped": self.members.dropped, "stalls": self.members.stalls,
                   "degraded": bool(self.members.stalls), "bytes_by_peer": self.counter.rows(),
                   "eval": self.evals[-1] if self.evals else None}
        write_summary(self.run_dir, summary)
        return summary

    def close(self) -> None:
        self.members.close()
        self.unchecked.flush(due_only=False)
        self.events.close()


def update_stats(rows: list[dict]) -> dict:
    """The timing, byte and lag medians of summary.json, from the update rows."""
    one = [v for r in rows for v in r["update_frame_bytes"].values()]
    return {
        "update_rows": len(rows),   # what the medians cover (a resumed learner: both lives' rows)
        "seconds_per_update_median": median(r["seconds_per_update"] for r in rows),
        # framing, checksums, rollout validation, hashing, snapshots, event rows (learner side)
        "harness_fraction_median": median(r["harness_s"] / r["seconds_per_update"] for r in rows
                                          if r["seconds_per_update"] > 0),
        "payload_bytes_per_update": {
            "update_payload": median(r["update_payload_bytes"] for r in rows),
            "learner_to_one_worker": median(one),
            "learner_to_workers_total": median(sum(r["update_frame_bytes"].values()) for r in rows),
        },
        "lag": {"median": median(r["lag"] for r in rows), "max": max((r["lag"] for r in rows), default=None)},
    }


def bytes_delta(before: dict, after: dict) -> dict:
    """{direction: {message type: frame bytes}} between two `ByteCounter.by_type()` readings."""
    out: dict = {}
    for (direction, msg_type), value in after.items():
        delta = value - before.get((direction, msg_type), 0)
        if delta:
            out.setdefault(direction, {})[msg_type] = delta
    return out


def params_json(params: RunParams) -> str:
    return json.dumps(params.to_json(), sort_keys=True)


KEPT_VERSION = re.compile(r"[0-9]{8}")   # policy/<version>/<name>: the version as learner_snapshot writes it


def check_resume(blob: bytes, params: RunParams) -> int:
    """The version a learner snapshot resumes at; a one-line ValueError when the bytes are not a
    learner snapshot of a run with exactly these parameters. Checked whole before any model is built
    (replica.read_snapshot: digest, finite values, AdamW state in range), then as a learner's: its run
    parameters an object equal to these, the version within the run and equal to AdamW's step count
    (the learner steps once per version), the optimizer config these parameters build, and every kept
    policy `policy/<version>/<name>` at a version up to the snapshot's with the adapter's layout."""
    meta, tensors = read_snapshot(blob)
    if "params" not in meta:
        raise ValueError("not a learner snapshot (it holds no run parameters)")
    try:
        theirs = json.loads(meta["params"])
    except ValueError:
        theirs = None
    if not isinstance(theirs, dict):
        raise ValueError(f"the snapshot's run parameters are not a JSON object ({meta['params'][:40]!r})")
    mine = json.loads(params_json(params))
    differ = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
    if differ:
        raise ValueError("a snapshot of a run with other parameters: " + ", ".join(
            f"{k}={str(theirs.get(k))[:40]!r} there, {mine.get(k)!r} here" for k in differ[:3]))
    version = int(meta["version"])
    if version > params.updates:
        raise ValueError(f"the snapshot is at version {version}, past the run's {params.updates} updates")
    if snapshot_step(tensors) != version:
        raise ValueError(f"the snapshot says version {version} but its AdamW state has taken "
                         f"{snapshot_step(tensors)} steps")
    optim = OptimConfig(lr=params.lr, weight_decay=params.weight_decay, max_grad_norm=params.max_grad_norm)
    if json.loads(meta["optim"]) != asdict(optim):
        raise ValueError(f"the snapshot's optimizer config {meta['optim'][:120]} is not the one these parameters build")
    adapter = {k[len("adapter/"):]: tuple(t.shape) for k, t in tensors.items() if k.startswith("adapter/")}
    for key, t in tensors.items():
        if key.startswith("extra/policy/"):
            _, _, kept, name = (key.split("/", 3) + ["", ""])[:4]
            if not KEPT_VERSION.fullmatch(kept) or int(kept) > version or adapter.get(name) != tuple(t.shape):
                raise ValueError(f"snapshot entry {key!r} is not a kept policy of this adapter at a version "
                                 f"up to {version}")
    return version


def check_resume_fits(blob: bytes, built: stack.Stack) -> None:
    """The snapshot (already through `check_resume`) loads into the run's built replica and a fresh
    compressor of its method: layout, optimizer config, compressor state; a one-line ValueError, and
    nothing of the run's own state touched."""
    built.replica.check_snapshot(blob)
    if built.method.replay:
        _, tensors = read_snapshot(blob)
        state = {k[len("extra/compressor/"):]: t for k, t in tensors.items() if k.startswith("extra/compressor/")}
        shapes = {n: tuple(t.shape) for n, t in built.replica.params.items()}
        for key, t in state.items():   # the error-feedback residual: one per adapter tensor, of its shape
            if key.startswith("residual/") and shapes.get(key.split("/", 2)[-1]) != tuple(t.shape):
                raise ValueError(f"the snapshot's compressor state {key!r} is not the residual of an adapter tensor")
        try:
            built.method.make_compressor().load_state_dict(state)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"the snapshot's compressor state does not fit {built.method.name} "
                             f"({' '.join(str(exc).split())[:160]})") from None


def kept_policies(extra: dict) -> list[tuple[int, dict]]:
    """The (version, adapter) policies a learner snapshot holds (`policy/<version>/<name>`), by version."""
    out: dict[int, dict] = {}
    for key, t in extra.items():
        if key.startswith("policy/"):
            _, version, name = key.split("/", 2)
            out.setdefault(int(version), {})[name] = t
    return sorted(out.items())


def build_objective(name: str, teacher, options: str = ""):
    """The objective called `name`, with its `--objective-options`; one whose card needs a teacher
    (distill) scores with the stack's (cached, one for every seed)."""
    given = parse_objective_options(name, options)
    if cards.objective(name).needs_teacher:
        return get_objective(name, teacher=teacher, **given)
    return get_objective(name, **given)


# the learner's plumbing flags (trainers/spec.py SERVICE_PARAMS); the run's parameters come beside them
LEARNER_FLAGS = ("listen", "run_dir", "worker_timeout", "liveness", "join_timeout", "handshake_timeout",
                 "max_pending_connections", "max_pending_per_source", "token_timeout", "max_frame_bytes",
                 "threads", "resume")


def main(argv=None) -> int:
    die_with_parent()  # first thing: a harness that dies takes its services with it
    p, args = service_args.parse("trainers.hilo.learner", __doc__, LEARNER_FLAGS, argv, run="given")
    params = args.params
    try:   # the objective's name is the spec's to check; its options, its card's
        parse_objective_options(params.objective, params.objective_options)
    except ValueError as e:
        p.error(f"--objective-options: {e}")
    resume = None
    if args.resume:
        try:
            resume = Path(args.resume).read_bytes()
            check_resume(resume, params)
        except (OSError, ValueError) as e:
            p.error(f"--resume {args.resume}: {e}")
    set_threads(args.threads)
    try:  # the run's stack, built once and handed down: an unknown task or method fails here, not in every worker
        built = stack.build(params, teacher=True)
    except ValueError as e:
        p.error(str(e))
    if resume is not None:
        try:
            check_resume_fits(resume, built)
        except ValueError as e:
            p.error(f"--resume {args.resume}: {e}")
    learner = Learner(params, args.token, args.run_dir, args.listen, worker_timeout_s=args.worker_timeout,
                      join_timeout_s=args.join_timeout, handshake_timeout_s=args.handshake_timeout,
                      max_frame_bytes=args.max_frame_bytes, max_pending_connections=args.max_pending_connections,
                      max_pending_per_source=args.max_pending_per_source, token_timeout_s=args.token_timeout,
                      liveness_s=args.liveness, built=built)
    # The address file lets a caller that asked for port 0 find the learner.
    atomic_write_text(f"{args.run_dir}/learner.addr", f"{learner.address[0]}:{learner.address[1]}\n")

    def interrupt(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    try:
        if resume is not None:
            learner.resume(resume)
        summary = learner.run()
        log(PROCESS, f"done: {summary['updates']} updates, consistent={summary['consistent']}")
        return 0 if summary["consistent"] else 3
    except (Interrupted, RuntimeError) as e:
        log(PROCESS, f"stopped early: {e}")
        learner.events.write("interrupted", reason=str(e))
        learner.members.stop_all(f"learner stopped: {e}")
        learner.write_summary(complete=False, status=f"interrupted: {e}")
        return 1
    except Exception as e:  # a bug: say so in summary.json too, never leave it "running"
        log(PROCESS, f"failed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        learner.events.write("failed", reason=f"{type(e).__name__}: {e}")
        learner.members.stop_all(f"learner failed: {type(e).__name__}")
        learner.write_summary(complete=False, status=f"failed: {type(e).__name__}: {e}")
        return 1
    finally:
        learner.close()


if __name__ == "__main__":
    imports_done()
    code = main()
    sys.stdout.flush(), sys.stderr.flush()
    # Skip interpreter teardown: daemon reader threads blocked in recv() must not race it (files are closed).
    os._exit(code)
