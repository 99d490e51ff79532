"""RoCEv2 operations from the BTH opcode of sampled headers (IBTA spec vol. 1, 9.2 and table 35; RoCEv2 annex).

A BTH opcode's top three bits are the transport (0 RC, 1 UC, 2 RD, 3 UD, 5 XRC; 0x80-0x9F the
manufacturer-defined range, where 0x81 is RoCEv2's congestion notification packet) and its low five bits
the operation. :func:`roce_op_codes` maps an opcode column to a small code column (int8, one per record,
-1 where there is no BTH) of :data:`ROCE_OPS`; :func:`roce_op_columns` turns it into the estimated packets
per operation, the matrix window's ``roce_<op>_packets_est`` columns (CNPs stay in ``cnp_packets_est``).
Columnar: one table lookup per batch, no per-record Python.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ROCE_OPS", "ROCE_OP_COLUMNS", "roce_op_codes", "roce_op_columns", "OP_OF_OPCODE"]

#: The operation classes, in code order (code i = ROCE_OPS[i]); "cnp" is the last
ROCE_OPS = ("send", "write", "read_request", "read_response", "ack", "atomic", "cnp")
#: matrix window / cell columns of the operations but cnp (cnp_packets_est predates them)
ROCE_OP_COLUMNS = tuple(f"roce_{op}_packets_est" for op in ROCE_OPS[:-1])

_LOW5 = {  # low five opcode bits -> class, for the transports that have the operation
    **{v: 0 for v in (0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17)},  # SEND first/middle/last/only (+imm, +inv)
    **{v: 1 for v in range(0x06, 0x0C)},  # RDMA WRITE first/middle/last/only (+imm)
    0x0C: 2,  # RDMA READ request
    **{v: 3 for v in range(0x0D, 0x11)},  # RDMA READ response first/middle/last/only
    0x11: 4,  # acknowledge
    0x12: 5, 0x13: 5, 0x14: 5,  # atomic acknowledge, CmpSwap, FetchAdd
}
_TRANSPORT_OPS = {0: set(_LOW5), 1: {*range(0x00, 0x06), *range(0x06, 0x0C)},  # RC: all; UC: SEND, WRITE
                  2: set(_LOW5), 3: {0x04, 0x05}, 5: set(_LOW5)}  # RD: all; UD: SEND only; XRC: all


def _table() -> np.ndarray:
    t = np.full(257, -1, dtype=np.int8)  # index opcode + 1: -1 (no BTH) reads t[0]
    for opcode in range(256):
        transport, low = opcode >> 5, opcode & 0x1F
        if low in _TRANSPORT_OPS.get(transport, ()):
            t[opcode + 1] = _LOW5[low]
    t[0x81 + 1] = ROCE_OPS.index("cnp")
    return t


#: opcode + 1 -> operation code (int8), -1 for no BTH, a reserved opcode or a manufacturer-defined one
OP_OF_OPCODE = _table()


def roce_op_codes(opcodes) -> np.ndarray:
    """int8 operation code per record from a ``roce_opcode`` column (-1 = no BTH or not an operation)."""
    op = np.asarray(opcodes, dtype=np.int64)
    return OP_OF_OPCODE[np.clip(op, -1, 255) + 1]


def roce_op_columns(opcodes, packets_est) -> dict[str, np.ndarray]:
    """``roce_<op>_packets_est`` (int64): each record's ``packets_est`` under its operation, 0 elsewhere."""
    codes = roce_op_codes(opcodes)
    p = np.asarray(packets_est, dtype=np.int64)
    zero = np.zeros(len(p), dtype=np.int64)
    return {col: np.where(codes == i, p, zero) for i, col in enumerate(ROCE_OP_COLUMNS)}
