"""TDengine's scalar functions in plain Python, written from TDengine's documentation
(docs/en/14-reference/03-taos-sql/22-function.md in taosdata/TDengine) and, where the
documentation is silent, its C code (source/libs/scalar/src/sclfunc.c): the independent
meaning the property tests compare every evaluation path with. Timestamps are ticks
(integers in the database precision); C's `/` and `%` truncate toward zero."""

from __future__ import annotations

import base64
import math
import struct
from datetime import UTC, date, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TICKS_PER_SECOND = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def c_mod(a: int, b: int) -> int:
    return a - b * c_div(a, b)


def unit_ticks(unit: str, precision: str) -> int:
    return UNIT_SECONDS[unit] * TICKS_PER_SECOND[precision]


def float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def moment(ticks: int, precision: str) -> datetime:
    """The instant of a timestamp (exact: whole microseconds at most are kept)."""
    scale = TICKS_PER_SECOND[precision]
    return EPOCH + timedelta(microseconds=ticks * 1_000_000 // scale)


# --- string functions -------------------------------------------------------------------


def substring(
    s: str | None, pos: int | None, length: int | None = None, *, has_len: bool = False
) -> str | None:
    """22-function.md SUBSTRING: pos 1-based, < 0 from the right, 0 gives ''; len < 1
    gives ''; beyond the end, to the end (substrFunction: a start before the first
    character starts at it)."""
    if s is None or pos is None or (has_len and length is None):
        return None
    if pos == 0 or (has_len and length is not None and length < 1):
        return ""
    n = len(s)
    start = min(pos - 1, n) if pos > 0 else max(n + pos, 0)
    end = n if not has_len or length is None else min(start + length, n)
    return s[start:end]


def substring_index(s: str | None, delim: str | None, count: int) -> str | None:
    """SUBSTRING_INDEX as findPosBytes scans: without overlap, from the left for
    count > 0 and from the right for count < 0; '' for count 0 or an empty delimiter."""
    if s is None or delim is None:
        return None
    if count == 0 or delim == "":
        return ""
    found, width = 0, len(delim)
    if count > 0:
        pos = 0
        while pos + width <= len(s):
            if s[pos : pos + width] == delim:
                found += 1
                if found == count:
                    return s[:pos]
                pos += width
            else:
                pos += 1
        return s
    pos = len(s) - width
    while pos >= 0:
        if s[pos : pos + width] == delim:
            found += 1
            if found == -count:
                return s[pos + width :]
            pos -= width
        else:
            pos -= 1
    return s


def trim(s: str | None, rem: str, side: str) -> str | None:
    """TRIM(side rem FROM s): rem removed as a whole, as often as it repeats."""
    if s is None:
        return None
    if rem and side in ("leading", "both"):
        while s.startswith(rem):
            s = s[len(rem) :]
    if rem and side in ("trailing", "both"):
        while s.endswith(rem):
            s = s[: -len(rem)]
    return s


def ascii_(s: str | None) -> int | None:
    """ASCII: the first byte (of a multi-byte character, its first byte); '' is 0."""
    if s is None:
        return None
    data = s.encode()
    return data[0] if data else 0


def char(*values: int | None) -> str | None:
    """CHAR: each integer's bytes, big-endian, no leading zero bytes; NULL skipped.
    sqltopic's rule where the bytes are not ASCII text: NULL."""
    out = b""
    for n in values:
        if n is None:
            continue
        if not 0 <= n < 2**32:
            return None
        data = n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")
        if any(b >= 128 for b in data):
            return None
        out += data
    return out.decode("ascii")


def to_base64(s: str | None) -> str | None:
    return None if s is None else base64.b64encode(s.encode()).decode()


def position(needle: str | None, hay: str | None) -> int | None:
    """POSITION(needle IN hay): 1-based characters, 0 when absent, 1 for ''."""
    if needle is None or hay is None:
        return None
    return hay.find(needle) + 1


def concat(*values: str | None) -> str | None:
    return None if any(v is None for v in values) else "".join(values)  # type: ignore[arg-type]


# --- mathematical functions -------------------------------------------------------------


def extreme(pick: Any, *values: Any) -> Any:
    """GREATEST / LEAST: NULL when any argument is NULL."""
    return None if any(v is None for v in values) else pick(values)


def mod(a: float | None, b: float | None) -> float | None:
    """MOD(a, b) and a % b: NULL when b is 0; C's remainder (the sign of a)."""
    if a is None or b is None or b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return c_mod(a, b)
    return math.fmod(a, b)


def truncate_int(x: int | None, digits: int) -> int | None:
    if x is None:
        return None
    if digits >= 0:
        return x
    return x - c_mod(x, 10**-digits)


def truncate_float(x: float | None, digits: int) -> float | None:
    """trunc(x * 10^digits) / 10^digits in DOUBLE (the C function's arithmetic)."""
    if x is None:
        return None
    scale = 10.0**digits
    v = x * scale
    return float(math.floor(v) if v >= 0 else math.ceil(v)) / scale


def real(fn: Any, *args: float | None) -> float | None:
    """A DOUBLE function: NULL for NULL, and where the result is NaN or infinite
    (sclfunc.c doScalarFunctionUnique: `if (isinf(result) || isnan(result))` NULL)."""
    if any(a is None for a in args):
        return None
    try:
        result = float(fn(*args))
    except (ValueError, OverflowError):
        return None
    return None if math.isnan(result) or math.isinf(result) else result


def ln(x: float | None) -> float | None:
    """LN: NULL when x <= 0."""
    return None if x is None or x <= 0 else math.log(x)


# --- time functions ---------------------------------------------------------------------


def timetruncate(t: int | None, unit: int) -> int | None:
    """timeTruncateFunction: timeVal / timeUnit * timeUnit (UTC: 1d and 1w alike)."""
    return None if t is None else t - c_mod(t, unit)


def timediff(a: int | None, b: int | None, unit: int = 1) -> int | None:
    return None if a is None or b is None else c_div(a - b, unit)


def to_iso8601(t: int | None, precision: str, zone: str | None = None) -> str | None:
    """toISO8601Function: seconds t / scale shifted by the zone, then
    snprintf(".%03ld", t % scale) cut to the fraction's width, then the zone as written
    (the client's, strftime %z: '+0000' in UTC, without one)."""
    if t is None:
        return None
    scale = TICKS_PER_SECOND[precision]
    digits = len(str(scale)) - 1
    offset = 0
    if zone is not None and zone not in ("z", "Z"):
        sign = 1 if zone[0] == "+" else -1
        hhmm = zone[1:].replace(":", "")
        offset = sign * (int(hhmm[:2]) * 3600 + int(hhmm[2:] or 0) * 60)
    seconds = c_div(t, scale) + offset
    stamp = (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f".{c_mod(t, scale):0{digits}d}"[: digits + 1]  # C's "%03ld": "-05" for -5
    return stamp + fraction + (zone if zone is not None else "+0000")


def weekday(t: int | None, precision: str) -> int | None:
    return None if t is None else moment(t, precision).weekday()


def dayofweek(t: int | None, precision: str) -> int | None:
    return None if t is None else moment(t, precision).isoweekday() % 7 + 1


def weekofyear(t: int | None, precision: str) -> int | None:
    return None if t is None else moment(t, precision).isocalendar()[1]


def week(t: int | None, precision: str, mode: int) -> int | None:
    """WEEK(expr, mode): the table of 22-function.md, as MySQL's calc_week computes it
    (MySQL's week_mode: a mode without Monday-first flips the first-weekday flag)."""
    if t is None:
        return None
    d = moment(t, precision).date()
    flags = mode if mode & 1 else mode ^ 4
    monday_first, week_year, first_weekday = bool(flags & 1), bool(flags & 2), bool(flags & 4)

    def weekday(day: date) -> int:  # 0 = the first day of the week
        return day.weekday() if monday_first else day.isoweekday() % 7

    def starts(w: int) -> bool:
        return w != 0 if first_weekday else w >= 4

    first = date(d.year, 1, 1)
    w = weekday(first)
    if d.month == 1 and d.day <= 7 - w:
        if not week_year and starts(w):
            return 0
        week_year = True
        first = date(d.year - 1, 1, 1)
        w = weekday(first)
    days = (d - first).days - (7 - w) if starts(w) else (d - first).days + w
    if week_year and days >= 52 * 7:
        year_days = (date(first.year + 1, 1, 1) - first).days
        w = (w + year_days) % 7
        if (not first_weekday and w < 4) or (first_weekday and w == 0):
            return 1
    return days // 7 + 1


# --- CAST (castFunction in sclfunc.c: C conversions) ---


def wrap(v: int, bits: int, signed: bool) -> int:
    """C's conversion of an integer to a `bits`-wide one (two's complement)."""
    u = v % (1 << bits)
    return u - (1 << bits) if signed and u >= 1 << (bits - 1) else u


def cast_int(x: float | int | None, bits: int, signed: bool) -> int | None:
    """A number truncated toward zero, then wrapped (NULL beyond int64: C undefined)."""
    if x is None:
        return None
    t = int(x)  # truncates toward zero
    if not -(2**63) <= t < (2**64 if not signed else 2**63):
        return None
    return wrap(t, bits, signed)


def cast_text(x: float | None, length: int) -> str | None:
    """A FLOAT/DOUBLE as `%f`, cut to `length` bytes."""
    return None if x is None else f"{x:f}"[:length]


def strtol(s: str | None) -> int | None:
    """C's strtol on the text: blanks, a sign, digits; 0 when there are none."""
    if s is None:
        return None
    body = s.lstrip(" \t\n\v\f\r")
    sign, digits = (body[0], body[1:]) if body[:1] in ("+", "-") else ("", body)
    n = len(digits) - len(digits.lstrip("0123456789"))
    value = int(digits[:n]) if n else 0
    value = -value if sign == "-" else value
    return max(-(2**63), min(2**63 - 1, value))


def strtod(s: str | None) -> float | None:
    """C's strtod on a decimal text: the longest number prefix; 0.0 when there is none."""
    if s is None:
        return None
    body = s.lstrip(" \t\n\v\f\r")
    for end in range(len(body), 0, -1):
        head = body[:end]
        if head[-1] in "0123456789." and head.lstrip("+-")[:1] in tuple("0123456789."):
            try:
                return float(head)
            except ValueError:
                continue
    return 0.0


def cast_bytes(s: str | None, length: int) -> str | None:
    """BINARY(n): the first n bytes (NULL where they end inside a character)."""
    if s is None:
        return None
    raw = s.encode()[:length]
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None
