"""The cost model: seconds per update of a method at any scale, from first principles (pure, torch-free).

    seconds per update = rollout + train + encode + transfer + decode/replay (+ the harness's own work)

One import for its callers (`from harness.projection import costmodel as cm`); the model lives in
four files, one concern each:

- harness/projection/bytes.py: what each method ships per update, from the adapter's shapes (a
  compressor's byte rule is on its card, trainers/cards);
- harness/projection/network.py: links, paths and TCP (goodput, slow start after idle, loss ceilings,
  star fan-out and relay trees);
- harness/projection/predict.py: compute terms and one update, serial or pipelined; comparisons and
  crossovers;
- harness/projection/fit.py: compute terms fitted from a measured run's updates table.

The model and every assumption in it are written down in docs/COSTMODEL.md.
"""
from __future__ import annotations

from harness.projection.bytes import (DELTA_HEADER_BYTES, DELTA_INDEX_BYTES, MODEL_OPTIONS, TYPICAL_VERSION, Adapter,
                                      StatedBytes, Tensors, budget_bytes, method_options, payload_bytes)
from harness.projection.fit import CLOCKS, LEARNER_PHASES, Fitted, budget_text, fit, measured, med
from harness.projection.network import (CONGESTION_CONTROLS, ETHERNET_HEADER_BYTES, IP_TCP_HEADER_BYTES,
                                        MTU_BYTES, SEND_BUFFER_BYTES, SEND_MODES, Access, fan_in, fan_out,
                                        goodput_ratio, loss_ceiling_Bps, Network, Node, Path, path,
                                        restart_window, stream_s, Transfer, tree_depth)
from harness.projection.predict import (Codec, compare, Compute, crossover_bit_s, predict, Prediction,
                                        split_compute)
from trainers.cards.compressors import SPAR_SIGMA_BYTES, TOPK_INDEX_BYTES
from trainers.cards.sizes import (CONTAINER_PREFIX_BYTES, CONTAINER_TABLE_LEN_BYTES, DTYPE_BYTES, FRAME_HEADER_BYTES,
                                  TABLE_ZLIB_LEVEL, container_bytes, container_header_bytes, tensor_table_bytes)

__all__ = ["Access", "Adapter", "CLOCKS", "CONGESTION_CONTROLS", "CONTAINER_PREFIX_BYTES", "CONTAINER_TABLE_LEN_BYTES",
           "Codec", "Compute", "DELTA_HEADER_BYTES", "DELTA_INDEX_BYTES", "DTYPE_BYTES", "ETHERNET_HEADER_BYTES",
           "FRAME_HEADER_BYTES", "Fitted", "IP_TCP_HEADER_BYTES", "LEARNER_PHASES", "MODEL_OPTIONS", "MTU_BYTES",
           "Network", "Node", "Path", "Prediction", "SEND_BUFFER_BYTES", "SEND_MODES", "SPAR_SIGMA_BYTES",
           "StatedBytes", "TABLE_ZLIB_LEVEL", "TOPK_INDEX_BYTES", "TYPICAL_VERSION", "Tensors", "Transfer", "budget_text",
           "budget_bytes", "compare", "container_bytes", "container_header_bytes", "crossover_bit_s", "fan_in",
           "fan_out", "fit", "goodput_ratio", "loss_ceiling_Bps", "measured", "med", "method_options", "path",
           "payload_bytes", "predict", "restart_window", "split_compute", "stream_s", "tensor_table_bytes",
           "tree_depth"]
