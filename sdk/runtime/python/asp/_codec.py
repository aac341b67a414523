"""Interprets the generated field tables (asp/_spec.py): params to wire maps, wire maps
to result dataclasses. The same rules as core/src/codec.c: senders omit fields equal to
their default and absent optional ones; receivers ignore unknown keys, apply defaults
for missing optional ones, and name the field that is wrong."""

import os

from ._errors import AspError

NO_DEFAULT = object()

UINT64_MAX = (1 << 64) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class Field:
    """One field of a record: wire name, Python attribute, type, flags, default."""

    __slots__ = ("name", "attr", "type", "optional", "nullable", "default", "role",
                 "record")

    def __init__(self, name, attr, type_, optional=False, nullable=False,
                 default=NO_DEFAULT, role=None, record=None):
        self.name = name
        self.attr = attr
        self.type = type_  # str bin uint int bool strv strmap records record
        self.optional = optional
        self.nullable = nullable
        self.default = default
        self.role = role
        self.record = record  # for records: the Record of the items; record: its Record

    @property
    def has_default(self):
        return self.default is not NO_DEFAULT

    @property
    def may_be_absent(self):
        return self.optional or self.nullable or self.has_default


class Record:
    """A record's fields and the dataclass it maps to. ``label`` names it in messages."""

    __slots__ = ("label", "fields", "cls", "one_of", "by_name")

    def __init__(self, label, fields, cls, one_of=None):
        self.label = label
        self.fields = fields
        self.cls = cls
        self.one_of = one_of
        self.by_name = {f.name: f for f in fields}


class Op:
    __slots__ = ("name", "since", "streaming", "params", "result")

    def __init__(self, name, since, streaming, params, result):
        self.name = name
        self.since = since
        self.streaming = streaming
        self.params = params
        self.result = result


_EXPECTED = {"str": "str", "bin": "bin", "uint": "uint", "int": "int", "bool": "bool",
             "strv": "array of str", "strmap": "map of str to str",
             "records": "array of maps", "record": "map"}


def type_name(v):
    """What a value is, in msgpack's words, as codec.c says it."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "uint" if v >= 0 else "negative int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "bin"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


class _Bad(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def _bad(rec, f, sub, v):
    return _Bad("%s: field '%s'%s: expected %s, got %s" % (
        rec.label, f.name, sub, "str" if sub else _EXPECTED[f.type], type_name(v)))


def _to_str(v):
    """A str argument: str as is, bytes and path-like objects as the raw path bytes."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, os.PathLike):
        return _to_str(os.fspath(v))
    return None


def _encode_value(rec, f, v):
    t = f.type
    if t == "str":
        s = _to_str(v)
        if s is None:
            raise _bad(rec, f, "", v)
        return s
    if t == "bin":
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v)
        if isinstance(v, str):
            return v.encode("utf-8", "surrogateescape")
        raise _bad(rec, f, "", v)
    if t in ("uint", "int"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise _bad(rec, f, "", v)
        if t == "uint" and not 0 <= v <= UINT64_MAX:
            if v < 0:
                raise _bad(rec, f, "", v)
            raise _Bad("%s: field '%s': value out of uint64 range" % (rec.label, f.name))
        if t == "int" and not INT64_MIN <= v <= INT64_MAX:
            raise _Bad("%s: field '%s': value out of int64 range" % (rec.label, f.name))
        return int(v)
    if t == "bool":
        if not isinstance(v, bool):
            raise _bad(rec, f, "", v)
        return v
    if t == "strv":
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
            raise _bad(rec, f, "", v)
        out = []
        for item in v:
            s = _to_str(item)
            if s is None:
                raise _bad(rec, f, " item", item)
            out.append(s)
        return out
    if t == "strmap":
        if not isinstance(v, dict):
            raise _bad(rec, f, "", v)
        out = {}
        for k, item in v.items():
            ks, vs = _to_str(k), _to_str(item)
            if ks is None:
                raise _bad(rec, f, " key", k)
            if vs is None:
                raise _bad(rec, f, " value", item)
            out[ks] = vs
        return out
    if t == "records":
        if not isinstance(v, (list, tuple)):
            raise _bad(rec, f, "", v)
        return [encode_record(f.record, item) for item in v]
    if t == "record":
        if isinstance(v, (str, bytes, list, tuple, int, float)):
            raise _bad(rec, f, "", v)
        return encode_record(f.record, v)
    raise _Bad("%s: field '%s': unknown field type" % (rec.label, f.name))


def _same(a, b):
    return type(a) is type(b) and a == b


def encode_record(rec, obj):
    """A params dataclass (or a dict of the same fields) -> the wire map."""
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    out = {}
    for f in rec.fields:
        v = get(f.attr, None)
        if v is None:
            if f.may_be_absent:
                continue
            raise _Bad("%s: missing field '%s'" % (rec.label, f.name))
        v = _encode_value(rec, f, v)
        if f.has_default and (_same(v, f.default) or (f.type == "bin" and not v)):
            continue
        out[f.name] = v
    if rec.one_of:
        a, b = (n in out for n in rec.one_of)
        if a == b:
            raise _Bad("%s: give exactly one of fields '%s' and '%s'" % (
                rec.label, rec.one_of[0], rec.one_of[1]))
    return out


def encode_params(rec, obj):
    """Params -> wire map; a wrong argument is invalid_argument naming the field."""
    try:
        return encode_record(rec, obj)
    except _Bad as e:
        raise AspError("invalid_argument", e.message) from None


def _decode_value(rec, f, v):
    t = f.type
    if t == "str":
        if not isinstance(v, str):
            raise _bad(rec, f, "", v)
        return v
    if t == "bin":
        if not isinstance(v, (bytes, bytearray)):
            raise _bad(rec, f, "", v)
        return bytes(v)
    if t == "uint":
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise _bad(rec, f, "", v)
        return v
    if t == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise _bad(rec, f, "", v)
        if v > INT64_MAX:
            raise _Bad("%s: field '%s': value out of int64 range" % (rec.label, f.name))
        return v
    if t == "bool":
        if not isinstance(v, bool):
            raise _bad(rec, f, "", v)
        return v
    if t == "strv":
        if not isinstance(v, list):
            raise _bad(rec, f, "", v)
        for item in v:
            if not isinstance(item, str):
                raise _bad(rec, f, " item", item)
        return list(v)
    if t == "strmap":
        if not isinstance(v, dict):
            raise _bad(rec, f, "", v)
        for k, item in v.items():
            if not isinstance(k, str):
                raise _bad(rec, f, " key", k)
            if not isinstance(item, str):
                raise _bad(rec, f, " value", item)
        return dict(v)
    if t == "records":
        if not isinstance(v, list):
            raise _bad(rec, f, "", v)
        return [_decode_record(f.record, item) for item in v]
    if t == "record":
        return _decode_record(f.record, v)
    raise _Bad("%s: field '%s': unknown field type" % (rec.label, f.name))


def _decode_record(rec, m):
    if not isinstance(m, dict):
        raise _Bad("%s: expected a map, got %s" % (rec.label, type_name(m)))
    values = {}
    for k, v in m.items():
        f = rec.by_name.get(k) if isinstance(k, str) else None
        if f is None:
            continue  # receivers ignore what they do not know
        if v is None and f.may_be_absent:
            continue
        values[f.attr] = _decode_value(rec, f, v)
    for f in rec.fields:
        if f.attr in values:
            continue
        if not f.may_be_absent:
            raise _Bad("%s: missing field '%s'" % (rec.label, f.name))
        d = f.default
        values[f.attr] = None if d is NO_DEFAULT else d
    return rec.cls(**values)


def decode_record(rec, m, code="protocol_error"):
    """A wire map -> the record's dataclass. A map we cannot read is the sender's
    protocol error (as asp_wire_result_decode says)."""
    try:
        return _decode_record(rec, m)
    except _Bad as e:
        raise AspError(code, e.message) from None
