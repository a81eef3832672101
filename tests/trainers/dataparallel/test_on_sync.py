"""inprocess.simulate's `on_sync` hook: it sees every sync's tables as exchanged, and only at syncs."""
import pytest

from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import simulate, tensor_bytes


@pytest.mark.parametrize("method,syncs", [("lordo-global", [2, 4, 5]), ("ddp", [1, 2, 3, 4, 5])])
def test_on_sync_sees_each_sync_tables_and_window_losses(method, syncs):
    seen = []

    def on_sync(step, ups, down, losses):
        seen.append((step, [tensor_bytes(u) for u in ups], tensor_bytes(down), [list(w) for w in losses]))

    cfg = DPConfig(steps=5, k=2, k_states=2, rank=4, lr=3e-3, seed=1)
    trace = simulate(method, cfg, workers=2, batch=2, seq_len=16, on_sync=on_sync)
    assert [s for s, *_ in seen] == syncs
    previous = 0
    for step, ups, down, losses in seen:
        assert ups[0] == ups[1] and (ups[0], down) == trace.data_bytes[step - 1] == trace.claimed[step - 1]
        assert [len(w) for w in losses] == [step - previous] * 2   # each worker's losses since its last sync
        for i, s in enumerate(range(previous + 1, step + 1)):
            assert (losses[0][i] + losses[1][i]) / 2 == pytest.approx(trace.losses[s - 1])
        previous = step
    assert all(trace.data_bytes[s - 1] == (0, 0) for s in range(1, 6) if s not in syncs)
