"""The two processes of one sandboxed check, each started by nsjail in its own jail.

Standard library only: the jails hold Python and its standard library, nothing else.

* `program` runs the generated code, then answers calls to the functions it defined.
* `checker` runs the task's trusted tests. It reaches those functions only through
  `Remote` callables that send the arguments and decode the answer as plain data (numbers,
  strings, bytes, lists, tuples, dicts, sets): what the tests compare is built here, never by the
  generated code, so no object with a forged `__eq__` and no write to the checker's memory
  or output can make a failing program pass. Only the checker prints the verdict, on a pipe the
  program's jail never holds.

The two talk over two pipes, one JSON line per message. The checker's first message is the
program's source.
"""

import _json
import builtins
import os
import sys
from itertools import islice

MAX_ITEMS = 1_000_000  # elements drawn from a returned iterator
MAX_LINE = 64 * 1024 * 1024  # bytes in one answer
MAX_DEPTH = 64


class NotPlainData(TypeError):
    """A value that cannot cross between the jails: only plain builtin data can."""


def encode(value, depth=0):
    """`value` as JSON-ready data tagged by type. Subclasses cross as their builtin base
    (a namedtuple as a tuple, a Counter as a dict), read through the base's own methods so an
    override cannot change what crosses."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
    if value is None or type(value) is bool:
        return value
    if type(value) is Handle:
        return ["ref", value.name]
    if isinstance(value, int):
        return ["int", hex(int.__index__(value))]
    if isinstance(value, float):
        return ["float", float.hex(float.__float__(value))]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return ["complex", float.hex(value.real), float.hex(value.imag)]
    if isinstance(value, (bytes, bytearray)):
        kind = "bytes" if isinstance(value, bytes) else "bytearray"
        return [kind, bytes(value).hex()]
    if isinstance(value, dict):
        items = dict.items(value)
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in items]]
    for kind, base in (("list", list), ("tuple", tuple), ("set", set), ("frozenset", frozenset)):
        if isinstance(value, base):
            return [kind, [encode(v, depth + 1) for v in base.__iter__(value)]]
    if isinstance(value, range):
        return ["range", hex(value.start), hex(value.stop), hex(value.step)]
    if hasattr(type(value), "__next__"):
        return ["iter", [encode(v, depth + 1) for v in islice(value, MAX_ITEMS)]]
    raise NotPlainData(f"a {type(value).__name__} cannot be compared outside the program")


def decode(data, refs=None):
    """Plain builtin values from `encode`'s output; nothing else can come out of it, except,
    on the program's side (`refs`, its namespace), the objects the tests hold handles to."""
    if data is None or isinstance(data, (bool, str)):
        return data
    kind, *payload = data
    if kind == "ref" and refs is not None:
        return refs[payload[0]]
    if kind == "int":
        return int(payload[0], 16)
    if kind == "float":
        return float.fromhex(payload[0])
    if kind == "complex":
        return complex(float.fromhex(payload[0]), float.fromhex(payload[1]))
    if kind in ("bytes", "bytearray"):
        raw = bytes.fromhex(payload[0])
        return raw if kind == "bytes" else bytearray(raw)
    if kind == "dict":
        return {decode(k, refs): decode(v, refs) for k, v in payload[0]}
    if kind == "range":
        return range(*(int(x, 16) for x in payload))
    containers = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    if kind in containers:
        return containers[kind](decode(v, refs) for v in payload[0])
    if kind == "iter":
        return iter([decode(v) for v in payload[0]])
    raise NotPlainData(f"unknown tag {kind!r}")


class StrictJSON:
    """The settings `_json`'s C scanner reads. The jails parse with it directly: `json` would
    import `re` and `enum`, a third of a jail's start-up."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float = parse_constant = float
    parse_int = int


SCAN = _json.make_scanner(StrictJSON())


def dumps(data):
    """JSON of what `encode` makes and the messages hold: None, booleans, strings, lists and
    string-keyed dicts (numbers travel as tagged strings)."""
    if data is None or type(data) is bool:
        return {None: "null", True: "true", False: "false"}[data]
    if type(data) is str:
        return _json.encode_basestring_ascii(data)
    if type(data) is dict:
        items = (f"{_json.encode_basestring_ascii(k)}:{dumps(v)}" for k, v in data.items())
        return "{" + ",".join(items) + "}"
    return "[" + ",".join(dumps(item) for item in data) + "]"


def loads(text):
    value, end = SCAN(text, 0)
    if text[end:].strip():
        raise ValueError("trailing data")
    return value


def send(stream, message):
    stream.write(dumps(message).encode() + b"\n")
    stream.flush()


def receive(stream):
    line = stream.readline(MAX_LINE + 1)
    if not line.endswith(b"\n"):
        raise EOFError(f"the other side ended (or sent more than {MAX_LINE} bytes)")
    return loads(line.decode("ascii"))


def serve(calls, answers):
    """The program's side: run the source, then answer each call until the checker hangs up."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    source = receive(calls)
    exec(compile(source, "program.py", "exec"), namespace)
    sys.stdout.flush()
    while True:
        try:
            request = receive(calls)
        except EOFError:
            return
        try:
            args = decode(request["args"], namespace)
            kwargs = decode(request["kwargs"], namespace)
            value = namespace[request["name"]](*args, **kwargs)
            answer = {"value": encode(value), "args": [encode_or_none(a) for a in args]}
        except BaseException as error:  # noqa: BLE001 - the checker decides what an error means
            answer = {"raised": type(error).__name__, "message": str(error)[:1000]}
        send(answers, answer)


def encode_or_none(value):
    """An argument as it is after the call, to mirror in-place changes; None where it cannot
    cross (an object the tests hold a handle to stays where it is)."""
    try:
        return encode(value)
    except NotPlainData:
        return None


class Handle:
    """A name the tests use for an object the program built (MBPP's setup code builds trees
    from the program's classes): it can only be passed back to the program's functions."""

    def __init__(self, name):
        self.name = name


class ProgramEnded(BaseException):
    """The program died, hung up or broke the protocol: a BaseException, so a test's
    `except Exception` cannot swallow it; the checker also records it."""


class Remote:
    """A function of the program, called from the tests: arguments out, plain data back."""

    def __init__(self, name, calls, answers, ended):
        self.__name__ = name
        self.calls, self.answers, self.ended = calls, answers, ended

    def __call__(self, *args, **kwargs):
        try:
            send(
                self.calls,
                {"name": self.__name__, "args": encode(list(args)), "kwargs": encode(kwargs)},
            )
            answer = receive(self.answers)
        except (OSError, EOFError, ValueError) as error:
            self.ended.append(error)
            raise ProgramEnded(str(error)) from None
        if "raised" in answer:
            raise raised(answer["raised"], answer["message"])
        for sent, returned in zip(args, answer["args"]):
            if returned is not None:
                update_in_place(sent, decode(returned))  # a function that mutates its argument
        return decode(answer["value"])


def raised(name, message):
    """The program's exception as the builtin of that name (tests may expect ValueError)."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(message)
    return RuntimeError(f"{name}: {message}")


def update_in_place(sent, returned):
    if type(sent) is list and type(returned) is list:
        sent[:] = returned
    elif type(sent) in (dict, set) and type(returned) is type(sent):
        sent.clear()
        sent.update(returned)


def judge(spec, calls, answers):
    """The checker's side: hand over the program, run the tests, return the verdict."""
    ended = []
    namespace = {"__name__": "__checker__", "__builtins__": builtins}
    try:
        send(calls, spec["program"])
        exec(compile(spec["prelude"], "prelude.py", "exec"), namespace)
        for name in spec["calls"]:
            namespace[name] = Remote(name, calls, answers, ended)
        for name in spec["handles"]:
            namespace[name] = Handle(name)
        exec(compile(spec["tests"], "tests.py", "exec"), namespace)
    except BaseException:  # noqa: BLE001 - any way out of the tests but the end is a failure
        import traceback

        traceback.print_exc()
        return "failed"
    return "failed" if ended else "passed"


def main():
    role, in_fd, out_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    incoming, outgoing = os.fdopen(in_fd, "rb"), os.fdopen(out_fd, "wb")
    if role == "program":
        serve(incoming, outgoing)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # no interpreter teardown (a sixth of a check's time): nothing is left to run
    spec = loads(sys.stdin.buffer.read().decode())
    verdict_fd = os.dup(1)
    os.dup2(2, 1)  # what the tests print goes with the log, not into the verdict
    verdict = judge(spec, outgoing, incoming)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(verdict_fd, dumps({"verdict": verdict}).encode())
    os._exit(0)  # no interpreter teardown


if __name__ == "__main__":
    main()
