"""The few Arrow Flight SQL messages the query server speaks, encoded by hand.

Flight SQL commands travel as protobuf ``google.protobuf.Any`` messages in a Flight
descriptor's ``cmd``, in tickets and in action bodies. The server needs a handful of them
(statement queries, prepared statements, tickets), each a field or two of bytes, so they are
read and written here rather than compiled from FlightSql.proto.
"""
from __future__ import annotations

PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
STATEMENT_QUERY = PREFIX + "CommandStatementQuery"
TICKET_STATEMENT_QUERY = PREFIX + "TicketStatementQuery"
PREPARED_STATEMENT_QUERY = PREFIX + "CommandPreparedStatementQuery"
CREATE_PREPARED_REQUEST = PREFIX + "ActionCreatePreparedStatementRequest"
CREATE_PREPARED_RESULT = PREFIX + "ActionCreatePreparedStatementResult"
CLOSE_PREPARED_REQUEST = PREFIX + "ActionClosePreparedStatementRequest"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def fields(data: bytes) -> dict[int, bytes]:
    """The length-delimited fields of a message (the last of a repeated number); varints are skipped.

    >>> fields(_field(1, b"abc") + _varint(2 << 3) + _varint(300) + _field(3, b""))
    {1: b'abc', 3: b''}
    """
    out, pos = {}, 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            out[number] = data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def pack(type_url: str, value: bytes) -> bytes:
    """An ``Any`` holding ``value`` of ``type_url``."""
    return _field(1, type_url.encode()) + _field(2, value)


def unpack(data: bytes) -> tuple[str, bytes]:
    """(type URL, value) of an ``Any``.

    >>> unpack(pack(STATEMENT_QUERY, _field(1, b"SELECT 1")))[0].rsplit(".", 1)[-1]
    'CommandStatementQuery'
    """
    f = fields(data)
    return f.get(1, b"").decode(), f.get(2, b"")


def ticket(handle: bytes) -> bytes:
    """A ticket: an ``Any`` holding a ``TicketStatementQuery`` (field 1: the statement handle)."""
    return pack(TICKET_STATEMENT_QUERY, _field(1, handle))


def first_field(data: bytes, type_url: str) -> bytes:
    """Field 1 of an ``Any`` of ``type_url``: the query text or the handle, in every message used here.

    >>> first_field(pack(STATEMENT_QUERY, _field(1, "SELECT 'ü'".encode())), STATEMENT_QUERY).decode()
    "SELECT 'ü'"
    """
    got, value = unpack(data)
    if got != type_url:
        raise ValueError(f"expected {type_url.rsplit('.', 1)[-1]}, got {got or 'nothing'}")
    return fields(value).get(1, b"")


def prepared_result(handle: bytes, dataset_schema: bytes) -> bytes:
    """An ``ActionCreatePreparedStatementResult``: the handle and the result's IPC schema (no parameters)."""
    return pack(CREATE_PREPARED_RESULT, _field(1, handle) + _field(2, dataset_schema))
