"""The shuffle topic's flow batch format (processors/shuffle.py): exact round trip, standard .npy, and bad
input always a CodecError (counted and skipped by detect), never another exception."""

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors import shuffle
from schemas.codec import CodecError, encode_batch
from schemas.columns import FLOW_DTYPE
from tests.synth import training_batches


def _flows(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=n * FLOW_DTYPE.itemsize, dtype=np.uint8)
    return np.frombuffer(raw.tobytes(), dtype=FLOW_DTYPE).copy()  # every byte pattern, incl. extreme values


@pytest.mark.parametrize("n", [0, 1, 7, 2000])
def test_round_trip_is_exact(n):
    flows = _flows(n, seed=n)
    msg = shuffle.encode_flows(flows)
    assert shuffle.is_flow_batch(msg)
    back = shuffle.decode_flows(msg)
    assert back.dtype == FLOW_DTYPE and len(back) == n
    assert back.tobytes() == flows.tobytes()


def test_real_batches_and_slices_round_trip():
    _exp, batch = training_batches(seconds=2)[0]
    for part in (batch, batch[::3], batch[5:17]):  # strided / sliced views are written contiguously
        assert shuffle.decode_flows(shuffle.encode_flows(part)).tobytes() == np.ascontiguousarray(part).tobytes()


def test_message_is_a_standard_npy_file():
    flows = _flows(5)
    loaded = np.load(io.BytesIO(shuffle.encode_flows(flows)), allow_pickle=False)
    assert loaded.tobytes() == flows.tobytes()
    buf = io.BytesIO()
    np.lib.format.write_array(buf, flows, version=(1, 0), allow_pickle=False)
    assert shuffle.encode_flows(flows) == buf.getvalue()  # what numpy itself writes


def test_avro_and_other_messages_are_told_apart():
    _exp, batch = training_batches(seconds=1)[0]
    assert not shuffle.is_flow_batch(encode_batch("flow_batch", batch[:3]))
    with pytest.raises(CodecError):
        shuffle.decode_flows(encode_batch("flow_batch", batch[:3]))


def test_wrong_dtype_and_shape_are_rejected():
    with pytest.raises(TypeError):
        shuffle.encode_flows(np.zeros(3, dtype=[("a", "<i8")]))
    for arr in (np.zeros(3, dtype=[("a", "<i8")]), np.zeros((2, 2), dtype=FLOW_DTYPE), np.zeros(3, dtype=np.int64)):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, version=(1, 0))
        with pytest.raises(CodecError):
            shuffle.decode_flows(buf.getvalue())


def test_truncated_and_padded_messages_are_rejected():
    msg = shuffle.encode_flows(_flows(4))
    for bad in (msg[:-1], msg + b"\x00", msg[:12], msg[:9]):
        with pytest.raises(CodecError):
            shuffle.decode_flows(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 2000))
def test_corrupt_messages_raise_codec_error_only(noise, cut):
    """Random bytes after the magic, or a real message cut / overwritten anywhere: a CodecError or a valid array."""
    real = shuffle.encode_flows(_flows(2))
    candidates = [shuffle.MAGIC + noise, shuffle.MAGIC + b"\x01\x00" + noise, real[: cut % (len(real) + 1)]]
    pos = cut % len(real)
    candidates.append(real[:pos] + noise[:8] + real[pos + len(noise[:8]) :])
    for msg in candidates:
        try:
            out = shuffle.decode_flows(msg)
        except CodecError:
            continue
        assert out.dtype == FLOW_DTYPE and out.ndim == 1
