"""The reference aggregation's sink records (upstream_context §1.9, §3.3).

A participant's output for one attempt (`Cut.output`, stored base64 in `SinkOutput.records_b64`)
is the msgspec msgpack encoding of a list of `[key, count_delta, sum_delta]` triples: what the
keyed aggregation added per key since the participant's last committed checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from laminar_cluster.codec import I64, U64
from laminar_cluster.errors import CorruptRecord, InvalidArgument

AggregateRecord = tuple[int, int, int]  # (key, count_delta, sum_delta)

_AGGREGATE_ENCODER: Final = msgspec.msgpack.Encoder()
_AGGREGATE_DECODER: Final = msgspec.msgpack.Decoder(list[tuple[U64, I64, I64]], strict=True)


def encode_aggregate_records(records: Iterable[AggregateRecord]) -> bytes:
    """The output bytes of `records` (msgpack list of [key, count_delta, sum_delta])."""
    triples = [(key, count, total) for key, count, total in records]
    try:
        data = _AGGREGATE_ENCODER.encode(triples)
    except (OverflowError, TypeError) as error:
        raise InvalidArgument(f"aggregate records: cannot be encoded: {error}") from error
    try:
        decode_aggregate_records(data, what="aggregate records")
    except CorruptRecord as error:  # a negative key, a delta beyond i64: refused before writing
        raise InvalidArgument(str(error)) from None
    return data


def decode_aggregate_records(
    data: bytes, *, what: str = "aggregate records"
) -> list[AggregateRecord]:
    """The triples `data` holds; CorruptRecord (naming `what`) if it is not exactly that."""
    try:
        return _AGGREGATE_DECODER.decode(data)
    except msgspec.ValidationError as error:
        raise CorruptRecord(f"{what}: not a list of [key, count, sum] triples: {error}") from None
    except msgspec.DecodeError as error:
        raise CorruptRecord(f"{what}: not valid msgpack: {error}") from None
