"""Structure-aware NetFlow v9 / IPFIX mutations: templates, options templates and data sets that fit them.

A message is split into header and sets (:func:`parse`); an edit changes one template (information
elements the decoder maps, lengths including IPFIX variable length, enterprise and RFC 5103 reverse
fields, withdrawal), one set (order, id, body) or the header, or *refits* a data set: it writes records
that match the template the set refers to (found anywhere in the input), variable-length fields with
1- and 3-byte length prefixes included. :func:`serialize` recomputes set lengths and the IPFIX message
length (usually; sometimes it is left wrong on purpose). Messages that do not parse are left to the
byte mutator.
"""

from __future__ import annotations

import random
import struct
from typing import Callable

from .bytemut import INTERESTING_16, INTERESTING_32

_HH = struct.Struct(">HH")
_HHH = struct.Struct(">HHH")
_U32 = struct.Struct(">I")
HEADER_LEN = {9: 20, 10: 16}
TEMPLATE_SETS = {9: (0, 1), 10: (2, 3)}
PEN_REVERSE = 29305
VAR_LEN = 0xFFFF
# (information element, usual length): what the decoder maps, plus a few it skips
IES = (
    (1, 4), (1, 8), (2, 4), (2, 8), (4, 1), (5, 1), (6, 1), (6, 2), (7, 2), (8, 4), (10, 2), (10, 4), (11, 2),
    (12, 4), (14, 4), (15, 4), (18, 4), (21, 4), (22, 4), (23, 8), (24, 8), (27, 16), (28, 16), (32, 2),
    (34, 4), (35, 1), (48, 1), (48, 2), (49, 1), (50, 4), (58, 2), (59, 2), (60, 1), (61, 1), (62, 16),
    (63, 16), (85, 8), (86, 8), (139, 2), (150, 4), (151, 4), (152, 8), (153, 8), (154, 8), (155, 8),
    (156, 8), (157, 8), (158, 4), (159, 4), (160, 8), (176, 1), (177, 1), (178, 1), (179, 1), (243, 2),
    (244, 1), (302, 4), (305, 4), (306, 4), (309, 4), (310, 4), (210, 3), (82, VAR_LEN), (96, VAR_LEN),
)
ODD_LENGTHS = (0, 1, 3, 5, 7, 9, 16, 17, 255, 256, VAR_LEN)

Mutator = Callable[[bytes, int], bytes]


def parse(d: bytes) -> tuple[int, bytes, list] | None:
    """``(version, header, [[set_id, body]])`` of a v9/IPFIX message, or None."""
    if len(d) < 4:
        return None
    version = (d[0] << 8) | d[1]
    hl = HEADER_LEN.get(version)
    if hl is None or len(d) < hl:
        return None
    sets, p = [], hl
    while len(d) - p >= 4:
        sid, ln = _HH.unpack_from(d, p)
        if ln < 4 or p + ln > len(d):
            return None
        sets.append([sid, d[p + 4 : p + ln]])
        p += ln
    return version, d[:hl], sets


def serialize(version: int, header: bytes, sets: list, fix_length: bool = True) -> bytes:
    body = b"".join(_HH.pack(sid, min(4 + len(b), 0xFFFF)) + b for sid, b in sets)
    if version == 10 and fix_length:
        header = header[:2] + struct.pack(">H", min(len(header) + len(body), 0xFFFF)) + header[4:]
    return header + body


# ---- templates -----------------------------------------------------------------------------------


def parse_templates(version: int, sid: int, body: bytes) -> list | None:
    """Templates of a (options) template set: ``[tid, scope_count, [(ie, pen, ln)]]``; None: unparsable."""
    opts = sid == TEMPLATE_SETS[version][1]
    out, p, L = [], 0, len(body)
    try:
        while L - p >= 4:
            if version == 9 and opts:
                tid, slen, olen = _HHH.unpack_from(body, p)
                if tid == 0:
                    break
                p += 6
                specs = [(ie, 0, ln) for ie, ln in struct.iter_unpack(">HH", body[p : p + slen + olen])]
                if len(specs) * 4 != slen + olen:
                    return None
                out.append([tid, slen // 4, specs])
                p += slen + olen
                continue
            tid, fc = _HH.unpack_from(body, p)
            if tid == 0 and fc == 0:
                break
            p += 4
            scope = 0
            if version == 10 and opts and fc:
                (scope,) = struct.unpack_from(">H", body, p)
                p += 2
            specs = []
            for _ in range(fc):
                ie, ln = _HH.unpack_from(body, p)
                p += 4
                pen = 0
                if version == 10 and ie & 0x8000:
                    (pen,) = _U32.unpack_from(body, p)
                    ie &= 0x7FFF
                    p += 4
                specs.append((ie, pen, ln))
            out.append([tid, scope, specs])
    except struct.error:
        return None
    return out


def serialize_templates(version: int, sid: int, templates: list) -> bytes:
    opts = sid == TEMPLATE_SETS[version][1]
    out = []
    for tid, scope, specs in templates:
        if version == 9:
            fields = b"".join(_HH.pack(ie & 0xFFFF, ln) for ie, _pen, ln in specs)
            if opts:
                slen = 4 * min(scope, len(specs))
                out.append(_HHH.pack(tid, slen, len(fields) - slen) + fields)
            else:
                out.append(_HH.pack(tid, len(specs)) + fields)
            continue
        parts = [_HH.pack(tid, len(specs))]
        if opts and specs:
            parts.append(struct.pack(">H", scope))
        for ie, pen, ln in specs:
            parts.append(_HH.pack((ie & 0x7FFF) | 0x8000, ln) + _U32.pack(pen) if pen else _HH.pack(ie & 0x7FFF, ln))
        out.append(b"".join(parts))
    return b"".join(out)


def _random_spec(version: int, rng: random.Random) -> tuple[int, int, int]:
    ie, ln = rng.choice(IES)
    if version == 9 and ln == VAR_LEN:
        ln = 4
    if rng.random() < 0.15:
        ln = rng.choice(ODD_LENGTHS if version == 10 else ODD_LENGTHS[:-1])
    pen = 0
    if version == 10 and rng.random() < 0.2:
        pen = PEN_REVERSE if rng.random() < 0.8 else rng.choice((9, 0xFFFFFFFF))
    return ie, pen, ln


def _edit_template(version: int, t: list, rng: random.Random) -> None:
    tid, scope, specs = t
    op = rng.randrange(7)
    if op == 0 or not specs:
        specs.insert(rng.randrange(len(specs) + 1), _random_spec(version, rng))
    elif op == 1:
        specs.pop(rng.randrange(len(specs)))
    elif op == 2:
        specs[rng.randrange(len(specs))] = _random_spec(version, rng)
    elif op == 3:  # reverse twin of a forward field (RFC 5103)
        ie, _pen, ln = rng.choice(specs)
        if version == 10:
            specs.insert(rng.randrange(len(specs) + 1), (ie, PEN_REVERSE, ln))
    elif op == 4:
        t[0] = rng.choice((256, 257, 258, 300, 65535, 255, 2, 3, 0, (tid + 1) & 0xFFFF))
    elif op == 5:
        t[1] = rng.choice((0, 1, 2, len(specs), len(specs) + 1))
    else:  # withdrawal (IPFIX) / empty template
        specs.clear()


# ---- data sets ---------------------------------------------------------------------------------


def _fit_records(specs: list, rng: random.Random, mut: Mutator) -> bytes:
    """Records matching a template: random values, variable-length fields with both length encodings
    (at most ~16 kB: a set must fit the input, and this runs for every mutation)."""
    rec_len = sum(1 if ln == VAR_LEN else ln for _ie, _pen, ln in specs)
    out = []
    for _ in range(min(rng.choice((1, 1, 2, 3, 8, 40)), max(1, 16384 // max(rec_len, 1)))):
        for _ie, _pen, ln in specs:
            if ln == VAR_LEN:
                n = rng.choice((0, 1, 4, 16, 254, 255, 300))
                prefix = bytes((n,)) if n < 255 and rng.random() < 0.8 else b"\xff" + struct.pack(">H", n)
                out.append(prefix + rng.randbytes(min(n, 64)) + bytes(max(0, n - 64)))
            else:
                out.append(_value(ln, rng))
    body = b"".join(out)
    if rng.random() < 0.3:
        body = mut(body, len(body) + 16)
    return body + bytes(rng.choice((0, 0, 1, 3)))


def _value(ln: int, rng: random.Random) -> bytes:
    if ln in (1, 2, 4, 8) and rng.random() < 0.5:
        v = rng.choice(INTERESTING_32 if ln >= 4 else INTERESTING_16) if rng.random() < 0.7 else rng.getrandbits(8 * ln)
        return (v & ((1 << (8 * ln)) - 1)).to_bytes(ln, "big")
    return rng.randbytes(ln)


def _templates_in(version: int, messages: list) -> dict:
    """Template id -> field specs, from every template set of the given parsed messages."""
    found = {}
    for m in messages:
        if m is None or m[0] != version:
            continue
        for sid, body in m[2]:
            if sid in TEMPLATE_SETS[version]:
                for tid, _scope, specs in parse_templates(version, sid, body) or ():
                    if specs:
                        found[tid] = specs
    return found


def mutate(d: bytes, rng: random.Random, mut: Mutator, donors: list[bytes]) -> bytes | None:
    """One structure-keeping edit of v9/IPFIX message ``d`` (None: it does not parse).

    ``donors``: the other datagrams of the input (their templates and sets can be used)."""
    m = parse(d)
    if m is None:
        return None
    version, header, sets = m
    tsets = TEMPLATE_SETS[version]
    op = rng.randrange(10)
    if op <= 2:  # edit a template
        idx = [i for i, (sid, _b) in enumerate(sets) if sid in tsets]
        if idx:
            i = rng.choice(idx)
            ts = parse_templates(version, sets[i][0], sets[i][1])
            if ts:
                _edit_template(version, rng.choice(ts), rng)
                sets[i][1] = serialize_templates(version, sets[i][0], ts)
        else:
            spec = [_random_spec(version, rng) for _ in range(rng.randrange(1, 6))]
            sets.insert(0, [tsets[0], serialize_templates(version, tsets[0], [[256, 0, spec]])])
    elif op <= 4:  # refit a data set to its template, or add one for a known template
        known = _templates_in(version, [m] + [parse(x) for x in donors])
        data = [i for i, (sid, _b) in enumerate(sets) if sid >= 256]
        if known:
            tid = rng.choice(list(known))
            if data and rng.random() < 0.6:
                i = rng.choice(data)
                tid = sets[i][0] if sets[i][0] in known else tid
                sets[i] = [tid, _fit_records(known[tid], rng, mut)]
            else:
                sets.insert(rng.randrange(len(sets) + 1), [tid, _fit_records(known[tid], rng, mut)])
    elif op == 5 and sets:  # mutate a set body
        s = rng.choice(sets)
        s[1] = mut(s[1], len(s[1]) + 64)
    elif op == 6 and sets:  # reorder / duplicate / drop sets (data before its template, twice, ...)
        s = sets.pop(rng.randrange(len(sets)))
        if rng.random() < 0.7:
            sets.insert(rng.randrange(len(sets) + 1), s)
            if rng.random() < 0.4:
                sets.insert(rng.randrange(len(sets) + 1), list(s))
    elif op == 7 and sets:  # change a set id
        s = rng.choice(sets)
        s[0] = rng.choice((0, 1, 2, 3, 4, 255, 256, 257, 65535) + tsets)
    elif op == 8:  # copy a set from another datagram of the input
        donor_sets = [s for x in donors for p in (parse(x),) if p is not None and p[0] == version for s in p[2]]
        if donor_sets:
            sets.insert(rng.randrange(len(sets) + 1), list(rng.choice(donor_sets)))
    else:  # header: domain / source id, sequence, times
        words = len(header) // 4
        at = 4 * rng.randrange(1, words)
        v = rng.choice(INTERESTING_32) if rng.random() < 0.7 else rng.getrandbits(32)
        header = header[:at] + _U32.pack(v) + header[at + 4 :]
    return serialize(version, header, sets, fix_length=rng.random() < 0.95)
