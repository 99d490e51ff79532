"""sFlow sampler loss per agent and data source, from the flow samples' ``sample_pool`` and ``drops``.

Between two consecutive flow samples of one data source (agent, sub-agent, source id) the deltas of
its cumulative 32-bit counters give the samples generated (``sequence_number``), the samples lost
inside the switch (``drops``) and the samples the pool says it should have produced
(``sample_pool`` / rate); loss ratio = drops / (drops + samples). Counters wrap modulo 2**32; a
sequence that went backwards (agent restart) starts the source afresh. :class:`SamplerLoss` keeps the
last counters per source (bounded) and turns one exporter's rows since its last flush into
per-exporter deltas and per-source sums (numpy per source). What the figures can and cannot tell:
docs/operations.md, "sFlow sampler loss". Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SamplerDelta", "SamplerLoss"]

_MASK = (1 << 32) - 1  # x & _MASK == x mod 2**32
_HALF = 1 << 31


@dataclass(slots=True)
class SamplerDelta:
    """Sampler figures of one exporter over the samples of one call or window (see the module doc).

    ``sources``: ``(sub-agent, source id) -> [samples, drops]``, so the worst source of a window is judged on
    its sums over the window (bounded by the exporter's data sources).
    """

    samples: int = 0
    drops: int = 0
    pool: int = 0
    samples_expected: float = 0.0
    sources: dict = field(default_factory=dict)

    def add(self, other: SamplerDelta) -> None:
        self.samples += other.samples
        self.drops += other.drops
        self.pool += other.pool
        self.samples_expected += other.samples_expected
        for k, (s, d) in other.sources.items():
            acc = self.sources.get(k)
            if acc is None:
                self.sources[k] = [s, d]
            else:
                acc[0] += s
                acc[1] += d

    def worst(self) -> tuple[int, int, float] | None:
        """``(sub-agent, source id, loss ratio)`` of the source with the largest sampler loss ratio, None if none lost."""
        best = None
        for (dom, src), (s, d) in self.sources.items():
            if d <= 0:
                continue
            r = d / (d + s)
            if best is None or r > best[2]:
                best = (dom, src, r)
        return best

    @property
    def loss_ratio(self) -> float:
        d = self.drops + self.samples
        return self.drops / d if self.drops > 0 and d > 0 else 0.0


class SamplerLoss:
    """Last (sequence, pool, drops) per (exporter, sub-agent, source); at most ``max_sources`` kept."""

    def __init__(self, max_sources: int = 200_000):
        self.max_sources = max_sources
        self._last: dict[tuple[str, int, int], tuple[int, int, int]] = {}
        self.dropped_sources = 0

    def __len__(self) -> int:
        return len(self._last)

    def observe(self, exporter: str, samples: np.ndarray) -> SamplerDelta:
        """Deltas of ``samples`` (``SAMPLE_DTYPE`` rows of one exporter, in arrival order)."""
        out = SamplerDelta()
        n = len(samples)
        if n == 0:
            return out
        dom, src, rate_all = samples["domain"], samples["source"], samples["rate"]
        key = (dom.astype(np.int64) << 32) | (src.astype(np.int64) & 0xFFFFFFFF)
        if n == 1 or (key[0] == key).all():
            groups = [slice(0, n)]  # one source (the common case): no gather
        else:
            order = np.argsort(key, kind="stable")  # arrival order within each source
            ks = key[order]
            groups = np.split(order, np.flatnonzero(ks[1:] != ks[:-1]) + 1)
        seq_all, pool_all, drops_all = samples["seq"], samples["pool"], samples["drops"]
        last = self._last
        for idx in groups:
            first = idx.start if type(idx) is slice else idx[0]
            d, s = int(dom[first]), int(src[first])
            kk = (exporter, d, s)
            prev = last.get(kk)
            seq, pool, drops = seq_all[idx], pool_all[idx], drops_all[idx]
            if prev is not None:
                seq = np.concatenate(([prev[0]], seq))
                pool = np.concatenate(([prev[1]], pool))
                drops = np.concatenate(([prev[2]], drops))
                rate = rate_all[idx]
            else:
                rate = rate_all[idx][1:]
            if len(seq) > 1:
                dseq = np.diff(seq) & _MASK
                ok = dseq < _HALF  # a sequence that went back: restart, no delta for that step
                dd = (np.diff(drops) & _MASK)[ok]
                dp = (np.diff(pool) & _MASK)[ok]
                ds = dseq[ok]
                r = np.maximum(rate[ok], 1)
                gs, gd, gp = int(ds.sum()), int(dd.sum()), int(dp.sum())
                out.samples += gs
                out.drops += gd
                out.pool += gp
                out.samples_expected += float((dp / r).sum())
                out.sources[(d, s)] = [gs, gd]
            if prev is None and len(last) >= self.max_sources:
                self.dropped_sources += 1
                continue
            last[kk] = (int(seq[-1]), int(pool[-1]), int(drops[-1]))
        return out
