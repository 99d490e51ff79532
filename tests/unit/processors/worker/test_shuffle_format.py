"""The shuffle topic's flow batch format (processors/worker/shuffle.py): exact round trip, standard .npy inside an
LZ4 block, and bad input always a CodecError (counted and skipped by detect), never another exception."""

import io

import cramjam
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.worker import shuffle
from schemas.codec import CodecError, encode_batch
from schemas.columns import FLOW_DTYPE
from tests.support.synth import training_batches


def _lz4(inner: bytes) -> bytes:
    """Any bytes in the shuffle's LZ4 framing (to reach the .npy checks behind it)."""
    return shuffle.LZ4_MAGIC + bytes(cramjam.lz4.compress_block(inner))


def _flows(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=n * FLOW_DTYPE.itemsize, dtype=np.uint8)
    return np.frombuffer(raw.tobytes(), dtype=FLOW_DTYPE).copy()  # every byte pattern, incl. extreme values


@pytest.mark.parametrize("n", [0, 1, 7, 2000])
def test_round_trip_is_exact(n):
    flows = _flows(n, seed=n)
    msg = shuffle.encode_flows(flows)
    assert shuffle.is_flow_batch(msg)
    assert msg.startswith(shuffle.LZ4_MAGIC)
    back = shuffle.decode_flows(msg)
    assert back.dtype == FLOW_DTYPE and len(back) == n
    assert back.tobytes() == flows.tobytes()


def test_real_batches_and_slices_round_trip():
    _exp, batch = training_batches(seconds=2)[0]
    for part in (batch, batch[::3], batch[5:17]):  # strided / sliced views are written contiguously
        assert shuffle.decode_flows(shuffle.encode_flows(part)).tobytes() == np.ascontiguousarray(part).tobytes()


def test_message_is_a_standard_npy_file_in_an_lz4_block():
    flows = _flows(5)
    plain = shuffle.npy_bytes(flows)
    loaded = np.load(io.BytesIO(plain), allow_pickle=False)
    assert loaded.tobytes() == flows.tobytes()
    buf = io.BytesIO()
    np.lib.format.write_array(buf, flows, version=(1, 0), allow_pickle=False)
    assert plain == buf.getvalue()  # what numpy itself writes
    msg = shuffle.encode_flows(flows)
    size = int.from_bytes(msg[8:12], "little")
    assert size == len(plain)
    assert bytes(cramjam.lz4.decompress_block(msg[12:], output_len=size)) == plain  # any LZ4 block decoder


def test_compression_pays_on_real_batches():
    batch = np.concatenate([b for _exp, b in training_batches(seconds=10)])
    assert len(batch) >= 80
    assert len(shuffle.encode_flows(batch)) * 4 < len(shuffle.npy_bytes(batch))


def test_lz4_length_and_block_mismatches_are_rejected():
    msg = shuffle.encode_flows(_flows(4))
    size = int.from_bytes(msg[8:12], "little")
    for stated in (size - 1, size + 1, 0, (1 << 30) + 1, 2**32 - 1):
        with pytest.raises(CodecError):
            shuffle.decode_flows(msg[:8] + stated.to_bytes(4, "little") + msg[12:])
    inner = shuffle.LZ4_MAGIC + bytes(cramjam.lz4.compress_block(b"not an npy file"))
    with pytest.raises(CodecError):
        shuffle.decode_flows(inner)


def test_avro_plain_npy_and_other_messages_are_told_apart():
    """Only the LZ4 form is a flow batch: Avro and the plain .npy of earlier versions are rejected."""
    _exp, batch = training_batches(seconds=1)[0]
    for other in (encode_batch("flow_batch", batch[:3]), shuffle.npy_bytes(batch[:3])):
        assert not shuffle.is_flow_batch(other)
        with pytest.raises(CodecError):
            shuffle.decode_flows(other)


def test_wrong_dtype_and_shape_are_rejected():
    with pytest.raises(TypeError):
        shuffle.encode_flows(np.zeros(3, dtype=[("a", "<i8")]))
    for arr in (np.zeros(3, dtype=[("a", "<i8")]), np.zeros((2, 2), dtype=FLOW_DTYPE), np.zeros(3, dtype=np.int64)):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, version=(1, 0))
        with pytest.raises(CodecError):
            shuffle.decode_flows(_lz4(buf.getvalue()))


def test_truncated_and_padded_messages_are_rejected():
    npy = shuffle.npy_bytes(_flows(4))
    msg = shuffle.encode_flows(_flows(4))
    for bad in (msg[:-1], msg + b"\x00", msg[:12], msg[:9], _lz4(npy[:-1]), _lz4(npy + b"\x00"), _lz4(npy[:9])):
        with pytest.raises(CodecError):
            shuffle.decode_flows(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 2000))
def test_corrupt_messages_raise_codec_error_only(noise, cut):
    """Random bytes after the magic, or a real message cut / overwritten anywhere: a CodecError or a valid array."""
    candidates = [_lz4(shuffle.MAGIC + noise), _lz4(shuffle.MAGIC + b"\x01\x00" + noise), shuffle.LZ4_MAGIC + noise]
    npy = shuffle.npy_bytes(_flows(2))
    for real in (shuffle.encode_flows(_flows(2)), _lz4(npy[: cut % (len(npy) + 1)])):
        candidates.append(real[: cut % (len(real) + 1)])
        pos = cut % len(real)
        candidates.append(real[:pos] + noise[:8] + real[pos + len(noise[:8]) :])
    for msg in candidates:
        try:
            out = shuffle.decode_flows(msg)
        except CodecError:
            continue
        assert out.dtype == FLOW_DTYPE and out.ndim == 1
