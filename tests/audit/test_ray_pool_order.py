"""`RayReplayPool.replay_in_order` without a cluster (a stand-in for the three Ray calls it
makes): results come back in entry order with IN_FLIGHT entries queued per actor, and an actor
that fails loses only the entries it held, then gets no more."""

from __future__ import annotations

from dataclasses import dataclass

from samebits.audit import ray_verify


@dataclass(eq=False)
class Ref:
    value: object


class FakeRay:
    def wait(self, refs, num_returns):
        return refs[-1:], refs[:-1]  # the newest first: completion order != submission order

    def get(self, ref):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value


@dataclass
class Entry:
    entry: dict
    where: str = "log:1"


class Actor:
    def __init__(self, name: str, fail: bool = False):
        self.name, self.fail, self.seen = name, fail, []
        self.replay = self

    def remote(self, logged):
        self.seen.append(logged.entry["seq"])
        if self.fail:
            return Ref(RuntimeError("actor died"))
        return Ref(ray_verify.ReplayResult(logged.entry["seq"], logged.where, True, "", 1))


def pool(*actors) -> ray_verify.RayReplayPool:
    p = object.__new__(ray_verify.RayReplayPool)
    p._ray, p.actors, p._started = FakeRay(), list(actors), False
    return p


def entries(n: int) -> list[Entry]:
    return [Entry({"seq": i, "output_token_ids": [1]}) for i in range(n)]


def test_results_in_entry_order_with_queued_entries():
    a, b = Actor("a"), Actor("b")
    out = list(pool(a, b).replay_in_order(entries(9)))
    assert [r.seq for r in out] == list(range(9)) and all(r.ok for r in out)
    assert sorted(a.seen + b.seen) == list(range(9)) and a.seen and b.seen


def test_a_failing_actor_loses_only_what_it_held():
    good, bad = Actor("good"), Actor("bad", fail=True)
    out = list(pool(good, bad).replay_in_order(entries(10)))
    assert [r.seq for r in out] == list(range(10))
    lost = {r.seq for r in out if not r.ok}
    assert lost == set(bad.seen) and 1 <= len(lost) <= ray_verify.IN_FLIGHT
    assert all("replay worker failed" in r.message for r in out if not r.ok)
    assert sorted(good.seen) == sorted(set(range(10)) - lost)
