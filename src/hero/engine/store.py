"""hero's keys in Redis (``state_url``): a lease per story, and what a worker publishes of
the story it runs for the coordinator to mirror into its home.

Keys, for a prefix ``P`` (``engine_queue``) and a story key ``K`` (``<id>``, ``<plan>/<id>``):

- ``P:lease:K``: the worker that runs the story (``host:pid:thread``), expiring after
  ``lease_s`` unless renewed. Taken with SET NX: one run per story at a time.
- ``P:pending:K``: the task id the coordinator sent; the worker that takes the lease
  clears it. Neither lease nor pending mark for long: the story was lost (a dead worker,
  a broker that lost its data), and the coordinator sends it again.
- ``P:state:K``: the run record (``runs/state/<id>.json``) as the worker last saved it.
- ``P:file:K:<name>`` (names in ``P:files:K``): ``runs/<K>/<name>`` as the worker has it:
  the round traces, verify logs, error log. Append-only files are appended to.
- ``P:story:K``: the story file as the worker has it (with the feedback hero appends).
- ``P:log:K``: the progress lines, in order.

Every write a worker makes checks, in the same Lua call, that it still holds the lease: a
worker that lost its story (it was presumed dead) cannot overwrite the new run's record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

#: Lease renewal: ``ok`` (still ours), ``retaken`` (it had vanished, a broker that lost its
#: data: taken again), ``lost`` (someone else holds it).
_RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'ok'
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'retaken'
end
return 'lost'
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
#: KEYS: lease, target[, files set]; ARGV: owner, op, value, expected length, name, lease ms.
#: -2: another worker holds the lease. A lease that vanished (a broker that lost its data)
#: is taken again, as a renewal would. -1: an append whose expected length is not the file's.
_WRITE = """
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[6])
elseif v ~= ARGV[1] then
  return -2
end
if ARGV[2] == 'set' then
  redis.call('SET', KEYS[2], ARGV[3])
elseif ARGV[2] == 'append' then
  if redis.call('STRLEN', KEYS[2]) ~= tonumber(ARGV[4]) then
    return -1
  end
  redis.call('APPEND', KEYS[2], ARGV[3])
elseif ARGV[2] == 'push' then
  return redis.call('RPUSH', KEYS[2], ARGV[3])
end
if KEYS[3] then
  redis.call('SADD', KEYS[3], ARGV[5])
end
return redis.call('STRLEN', KEYS[2])
"""


class LeaseLost(Exception):
    """Another worker holds the story now: this one must stop writing and running it."""


class Store:
    def __init__(self, url: str, prefix: str, lease_s: float) -> None:
        import redis

        self.redis: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=15, socket_connect_timeout=5, health_check_interval=15
        )
        self.prefix = prefix
        self.lease_ms = max(1000, int(lease_s * 1000))
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)
        self._write = self.redis.register_script(_WRITE)

    def key(self, kind: str, story: str, name: str = "") -> str:
        return f"{self.prefix}:{kind}:{story}" + (f":{name}" if name else "")

    # -- the lease -----------------------------------------------------------------------

    def take(self, story: str, owner: str) -> bool:
        return bool(self.redis.set(self.key("lease", story), owner, nx=True, px=self.lease_ms))

    def renew(self, story: str, owner: str) -> str:
        return _text(self._renew(keys=[self.key("lease", story)], args=[owner, self.lease_ms]))

    def release(self, story: str, owner: str) -> None:
        self._release(keys=[self.key("lease", story)], args=[owner])

    def holder(self, story: str) -> str | None:
        value = self.redis.get(self.key("lease", story))
        return _text(value) if value is not None else None

    # -- the pending mark ------------------------------------------------------------------

    def mark_pending(self, story: str, task_id: str) -> None:
        self.redis.set(self.key("pending", story), task_id)

    def clear_pending(self, story: str, dispatch: str | None = None) -> None:
        """Drop the pending mark (only if it is ``dispatch``'s, when given)."""
        if dispatch is None:
            self.redis.delete(self.key("pending", story))
        else:
            self._release(keys=[self.key("pending", story)], args=[dispatch])

    def pending(self, story: str) -> str | None:
        value = self.redis.get(self.key("pending", story))
        return _text(value) if value is not None else None

    # -- what a worker publishes (under its lease) -----------------------------------------

    def put_state(self, story: str, owner: str, record: str) -> None:
        self._checked(story, owner, self.key("state", story), "set", record)

    def put_story(self, story: str, owner: str, text: str) -> None:
        self._checked(story, owner, self.key("story", story), "set", text)

    def push_log(self, story: str, owner: str, line: str) -> None:
        self._checked(story, owner, self.key("log", story), "push", line)

    def append_file(self, story: str, owner: str, name: str, data: bytes, offset: int) -> bool:
        """Append ``data`` to the file, whose published length must be ``offset``; False
        when it is not (the key was lost, or never written): then :meth:`set_file`."""
        result = self._write(
            keys=[
                self.key("lease", story),
                self.key("file", story, name),
                self.key("files", story),
            ],
            args=[owner, "append", data, offset, name, self.lease_ms],
        )
        if result == -2:
            raise LeaseLost(story)
        return bool(result != -1)

    def set_file(self, story: str, owner: str, name: str, data: bytes) -> None:
        result = self._write(
            keys=[
                self.key("lease", story),
                self.key("file", story, name),
                self.key("files", story),
            ],
            args=[owner, "set", data, 0, name, self.lease_ms],
        )
        if result == -2:
            raise LeaseLost(story)

    def _checked(self, story: str, owner: str, target: str, op: str, value: str) -> None:
        args: list[str | int] = [owner, op, value, 0, "", self.lease_ms]
        if self._write(keys=[self.key("lease", story), target], args=args) == -2:
            raise LeaseLost(story)

    def set_done(self, story: str, owner: str, dispatch: str, status: str, worker: str) -> None:
        """The run of ``dispatch`` is over (``status``): the coordinator may stop waiting.
        Under the lease, like every write a worker makes."""
        record = {"dispatch": dispatch, "status": status, "worker": worker}
        self._checked(story, owner, self.key("done", story), "set", json.dumps(record))

    def done(self, story: str) -> dict[str, str]:
        value = self.redis.get(self.key("done", story))
        try:
            record = json.loads(value) if value is not None else {}
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}

    # -- what the coordinator reads --------------------------------------------------------

    def state(self, story: str) -> str | None:
        value = self.redis.get(self.key("state", story))
        return _text(value) if value is not None else None

    def story_text(self, story: str) -> str | None:
        value = self.redis.get(self.key("story", story))
        return _text(value) if value is not None else None

    def file_names(self, story: str) -> list[str]:
        return sorted(_text(n) for n in self.redis.smembers(self.key("files", story)))

    def file_length(self, story: str, name: str) -> int:
        return int(self.redis.strlen(self.key("file", story, name)))

    def file_bytes(self, story: str, name: str, start: int) -> bytes:
        value = self.redis.getrange(self.key("file", story, name), start, -1)
        if isinstance(value, str):
            return value.encode("utf-8")
        return bytes(value) if value else b""

    def log_lines(self, story: str, start: int) -> list[str]:
        return [_text(v) for v in self.redis.lrange(self.key("log", story), start, -1)]

    def forget(self, story: str) -> None:
        """Drop what was published of a story that ended and was mirrored."""
        names = self.file_names(story)
        self.redis.delete(
            self.key("state", story),
            self.key("story", story),
            self.key("log", story),
            self.key("files", story),
            *(self.key("file", story, n) for n in names),
        )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
