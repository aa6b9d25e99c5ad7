"""The one codec of every record: JSON through msgspec, decoders cached per type, unknown versions
refused (:class:`SchemaError`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from topics.schemas.versions import READABLE_VERSIONS, SCHEMA_VERSION

T = TypeVar("T", bound=msgspec.Struct)


def _as_base(value: Any) -> Any:
    """msgspec's hook for what it does not encode itself: a subclass of ``str``, ``int`` or
    ``float`` (lxml's text results, a ``str`` subclass, are what Scrapy's link extractors give)
    goes as its base type; anything else is refused, naming the type. (msgspec encodes ``dict``
    and ``list`` subclasses as they are.)"""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_encoder = msgspec.json.Encoder(enc_hook=_as_base)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


class SchemaError(ValueError):
    """A record does not match its topic's schema."""


def encode(msg: msgspec.Struct) -> bytes:
    """The record's JSON (TypeError when something in it cannot be encoded: see :func:`unencodable`)."""
    return _encoder.encode(msg)


def unencodable(value: Any) -> str:
    """Why :func:`encode` would refuse ``value`` inside a record ("" when it takes it): the check
    that a record can go is the encoder itself, so the two never disagree."""
    try:
        _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


def decode(data: bytes, kind: type[T]) -> T:
    """Decode ``data`` as ``kind``; raise :class:`SchemaError` on any mismatch or unknown version."""
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        msg: T = dec.decode(data)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"{kind.__name__}: {exc}") from exc
    version = getattr(msg, "v", SCHEMA_VERSION)
    if version not in READABLE_VERSIONS:
        raise SchemaError(f"{kind.__name__}: unsupported schema version {version}")
    return msg
