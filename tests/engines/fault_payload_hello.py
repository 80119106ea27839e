#!/usr/bin/python3
"""fault_payload_hello.py - breaks "a hello carries no payload": its hello header announces
payload_bytes FAULT_HELLO_PAYLOAD_BYTES (default 10^12) and is followed by min(that, 16) zero
bytes. Otherwise it is good.py (vtlab must refuse it at start-up: exit 2, nothing written)."""
import json
import os
import sys

import fake
import vtp


class HelloWithPayload:
    """stdout whose first frame (serve's hello) goes out with payload_bytes and some payload."""

    def __init__(self, f, n):
        self.f, self.n, self.first = f, n, True

    def write(self, data):
        if self.first:
            self.first = False
            i = data.index(b"\n")
            h = json.loads(data[:i].decode("utf-8"))
            h["payload_bytes"] = self.n
            data = json.dumps(h, separators=(",", ":")).encode("utf-8") + b"\n" + b"\0" * min(self.n, 16) + data[i + 1:]
        return self.f.write(data)

    def flush(self):
        self.f.flush()


def main():
    knobs, scale = fake.make_knobs()
    n = int(os.environ.get("FAULT_HELLO_PAYLOAD_BYTES", str(10 ** 12)))
    out = HelloWithPayload(sys.stdout.buffer, n)
    sys.stdout = sys.stderr               # as serve does for its own stdout
    return vtp.serve(fake.hello("fault_payload_hello", knobs), lambda req: fake.response(req, scale), stdout=out)


if __name__ == "__main__":
    sys.exit(main())
