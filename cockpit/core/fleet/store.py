"""A fleet's durable state: its agents, their tiers, scores and promotions, in SQLite.

`fleet.db` lives in the run directory beside run.toml. It is opened in WAL mode with
`synchronous=FULL`, and every change is one transaction, so a kill -9 of the cockpit at any moment
leaves either the whole change or none of it: a result recorded with its agent's status, or a sync
tier's promotions all together. `cockpit fleet --resume` rebuilds the run from it.

Tables:
- `meta`: the plan's TOML text and its source path, as the fleet began (a resume runs that plan,
  even if the file changed since), the `--rate` it was given, and `decided:<tier>` for each tier
  whose sync promotion is made;
- `agents`: one row per agent of the matrix, with the tier it is in (-1 before it starts) and its
  status there: `waiting` (not started), `training` (assigned to its tier, no score yet: queued,
  running or resuming), `scored` (its tier's result is in `results`), `failed` (its worker failed
  past the restart policy; it is out of the ranking);
- `results`: an agent's score at the end of a tier, with its training return and steps;
- `promotions`: an agent promoted out of a tier. An agent is culled in a tier when it has a result
  there, no promotion from it, and the tier can promote no more;
- `lineage` (promotion = "pbt", `cockpit.core.fleet.pbt`): an agent that, at the end of `tier`,
  copied `source`'s checkpoint (`checkpoint`, the directory name, at `source_steps`) and changed its
  searched values (`changes`, JSON `{key: [source's, new]}`); `applied` once the copy is in place (a
  resumed fleet redoes the file work of a decision recorded but not applied).
- `draws`: with `[agents.search]`, each draw made: its Optuna trial number and its values
  (`cockpit.core.fleet.search`), recorded with its agents' overrides and preset in one transaction.

Readers (`cockpit report`, a viewer) open it read-only; WAL lets them read while the cockpit writes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FLEET_DB = "fleet.db"
AgentStatus = Literal["waiting", "training", "scored", "failed"]
NewAgent = tuple[str, int, str, str, dict[str, Any], int]  # id, index, env, preset argument, overrides, seed

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY, idx INTEGER NOT NULL, env TEXT NOT NULL, preset TEXT NOT NULL,
    overrides TEXT NOT NULL, seed INTEGER NOT NULL,
    tier INTEGER NOT NULL DEFAULT -1, status TEXT NOT NULL DEFAULT 'waiting', error TEXT
);
CREATE TABLE IF NOT EXISTS results (
    agent TEXT NOT NULL REFERENCES agents(id), tier INTEGER NOT NULL, steps INTEGER NOT NULL,
    score REAL NOT NULL, score_std REAL, train_return REAL, t REAL NOT NULL, PRIMARY KEY (agent, tier)
);
CREATE TABLE IF NOT EXISTS promotions (
    agent TEXT NOT NULL REFERENCES agents(id), from_tier INTEGER NOT NULL, t REAL NOT NULL,
    PRIMARY KEY (agent, from_tier)
);
CREATE TABLE IF NOT EXISTS lineage (
    agent TEXT NOT NULL REFERENCES agents(id), tier INTEGER NOT NULL, source TEXT NOT NULL REFERENCES agents(id),
    source_steps INTEGER NOT NULL, checkpoint TEXT NOT NULL, changes TEXT NOT NULL, score REAL, source_score REAL,
    applied INTEGER NOT NULL DEFAULT 0, t REAL NOT NULL, PRIMARY KEY (agent, tier)
);
CREATE TABLE IF NOT EXISTS draws (draw INTEGER PRIMARY KEY, trial INTEGER NOT NULL, params TEXT NOT NULL);
"""


SQLITE_FULL = 13  # sqlite3.h: "Insertion failed because database is full" (also a full disk)


def disk_full(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused a write for want of space (SQLITE_FULL, "database or disk is full")."""
    return getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "is full" in str(exc)


class FleetStoreError(RuntimeError):
    """fleet.db is missing, unreadable or not a fleet's, or a row of it is damaged; the message is
    one line naming the file (and the table, row and column of a damaged value)."""


@dataclass(frozen=True)
class AgentRow:
    """One agent as stored: its settings, the tier it is in and its status there."""

    id: str
    index: int
    env: str
    preset: str
    overrides: dict[str, Any]
    seed: int
    tier: int
    status: AgentStatus
    error: str | None


@dataclass(frozen=True)
class Result:
    """An agent's score at the end of a tier."""

    agent: str
    tier: int
    steps: int
    score: float
    score_std: float | None
    train_return: float | None
    seed: int
    t: float


@dataclass(frozen=True)
class Exploit:
    """A PBT decision (the `lineage` table): at the end of `tier`, `agent` copied `source`'s
    checkpoint directory `checkpoint` (taken at `source_steps`) and changed its searched values,
    `changes` {key: (the source's value, the new one)}; `score` and `source_score` are theirs in that tier."""

    agent: str
    tier: int
    source: str
    source_steps: int
    checkpoint: str
    changes: dict[str, tuple[Any, Any]]
    score: float | None = None
    source_score: float | None = None
    applied: bool = False
    # What the agent trains with from the next tier on: its preset argument and overrides.
    preset: str = ""
    overrides: dict[str, Any] | None = None


class FleetStore:
    """fleet.db, open for the cockpit that runs the fleet (or read-only for a reader)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        if read_only:
            if not path.is_file():
                raise FleetStoreError(f"{path}: no fleet database there")
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        else:
            self._db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        self._db.row_factory = sqlite3.Row

    @classmethod
    def in_run_dir(cls, run_dir: Path, *, read_only: bool = False) -> FleetStore:
        """The store of the fleet in `run_dir`."""
        return cls(run_dir / FLEET_DB, read_only=read_only)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a COMMIT refused on a full disk may or may not
            # be): either way nothing of this transaction is kept.
            with suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise

    # ----- writing (the cockpit that runs the fleet) -----

    def create(self, plan_text: str, plan_source: str, agents: list[NewAgent]) -> None:
        """Record the plan and every agent (id, index, env, preset, overrides, seed), waiting."""
        meta = [("plan", plan_text), ("plan_source", plan_source), ("created", str(time.time()))]
        with self._transaction() as db:
            db.executemany("INSERT INTO meta VALUES (?, ?)", meta)
            db.executemany(
                "INSERT INTO agents (id, idx, env, preset, overrides, seed) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (a, i, env, preset, json.dumps(overrides, sort_keys=True), seed)
                    for a, i, env, preset, overrides, seed in agents
                ],
            )

    def set_meta(self, key: str, value: str) -> None:
        """Record a `meta` value, replacing any."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def start(self, agent: str, tier: int) -> None:
        """`agent` trains in `tier` from now (its first tier; later tiers come with a promotion)."""
        with self._transaction() as db:
            db.execute("UPDATE agents SET tier = ?, status = 'training' WHERE id = ?", (tier, agent))

    def record(
        self, agent: str, tier: int, *, steps: int, score: float, score_std: float | None, train_return: float | None
    ) -> None:
        """`agent` ended `tier` with this score; once recorded, a result is never replaced."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                (agent, tier, steps, score, score_std, train_return, time.time()),
            )
            db.execute("UPDATE agents SET status = 'scored' WHERE id = ? AND tier = ?", (agent, tier))

    def fail(self, agent: str, tier: int, error: str) -> None:
        """`agent` could not finish `tier`: out of the ranking."""
        with self._transaction() as db:
            db.execute("UPDATE agents SET status = 'failed', error = ? WHERE id = ? AND tier = ?", (error, agent, tier))

    def promote(self, agents: list[str], from_tier: int, *, decided: bool = False) -> None:
        """Promote `agents` out of `from_tier` into the next tier, all in one transaction; `decided`
        also records that the tier promotes no one else (sync), even when `agents` is empty."""
        now = time.time()
        with self._transaction() as db:
            if decided:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"decided:{from_tier}", str(len(agents))))
            db.executemany("INSERT INTO promotions VALUES (?, ?, ?)", [(a, from_tier, now) for a in agents])
            db.executemany(
                "UPDATE agents SET tier = ?, status = 'training' WHERE id = ? AND tier = ?",
                [(from_tier + 1, a, from_tier) for a in agents],
            )

    def pbt_boundary(
        self,
        tier: int,
        everyone: list[str],
        exploits: list[Exploit],
        *,
        decided: bool = True,
        retuned: Sequence[tuple[str, str, dict[str, Any]]] = (),
    ) -> None:
        """A PBT tier boundary in one transaction: each exploit's lineage row with its agent's new
        preset argument and overrides, each `retuned` (agent, preset argument, overrides: a replay's
        next values), and every agent in `everyone` on to the next tier; `decided` (sync) also
        records that the tier is done, where an asynchronous boundary moves its agents one by one."""
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO lineage VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                [
                    (
                        e.agent,
                        e.tier,
                        e.source,
                        e.source_steps,
                        e.checkpoint,
                        json.dumps({k: list(v) for k, v in e.changes.items()}, sort_keys=True),
                        e.score,
                        e.source_score,
                        now,
                    )
                    for e in exploits
                ],
            )
            db.executemany(
                "UPDATE agents SET preset = ?, overrides = ? WHERE id = ?",
                [(e.preset, json.dumps(e.overrides or {}, sort_keys=True), e.agent) for e in exploits],
            )
            db.executemany(
                "UPDATE agents SET preset = ?, overrides = ? WHERE id = ?",
                [(preset, json.dumps(overrides, sort_keys=True), agent) for agent, preset, overrides in retuned],
            )
            if decided:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"decided:{tier}", str(len(everyone))))
            db.executemany("INSERT OR IGNORE INTO promotions VALUES (?, ?, ?)", [(a, tier, now) for a in everyone])
            db.executemany(
                "UPDATE agents SET tier = ?, status = 'training' WHERE id = ? AND tier = ?",
                [(tier + 1, a, tier) for a in everyone],
            )

    def applied(self, agent: str, tier: int) -> None:
        """The copy of `agent`'s exploit at the end of `tier` is in place."""
        with self._transaction() as db:
            db.execute("UPDATE lineage SET applied = 1 WHERE agent = ? AND tier = ?", (agent, tier))

    def record_draw(
        self,
        draw: int,
        trial: int,
        params: dict[str, Any],
        agents: list[tuple[str, str, dict[str, Any]]],
        *,
        refused: str | None = None,
    ) -> None:
        """Draw `draw` is Optuna trial `trial` with values `params`; each of its `agents` (id,
        preset argument, overrides with the values) takes them, in the same transaction: a resumed
        fleet finds a draw with its agents' values, or neither. `refused`: a preset refused the
        values, and the agents fail in tier 0 with it, in that transaction too."""
        with self._transaction() as db:
            db.execute("INSERT INTO draws VALUES (?, ?, ?)", (draw, trial, json.dumps(params, sort_keys=True)))
            db.executemany(
                "UPDATE agents SET preset = ?, overrides = ? WHERE id = ?",
                [(preset, json.dumps(overrides, sort_keys=True), agent) for agent, preset, overrides in agents],
            )
            if refused is not None:
                db.executemany(
                    "UPDATE agents SET tier = 0, status = 'failed', error = ? WHERE id = ?",
                    [(refused, agent) for agent, _preset, _overrides in agents],
                )

    # ----- reading -----

    def _json(self, text: Any, table: str, row: str, column: str) -> dict[str, Any]:
        """A JSON column's value, which this store always writes as an object; FleetStoreError
        naming the row for anything else (a disk that garbled it, a hand edit)."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise FleetStoreError(f"{self.path}: table {table}, row {row}: {column} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise FleetStoreError(f"{self.path}: table {table}, row {row}: {column} is not a JSON object: {text!r:.80}")
        return value

    def draws(self) -> dict[int, tuple[int, dict[str, Any]]]:
        """Each draw made: (its trial number, its values); empty without a search (or in a fleet.db
        from before searches, which has no such table)."""
        try:
            rows = self._db.execute("SELECT * FROM draws ORDER BY draw").fetchall()
        except sqlite3.OperationalError:
            return {}
        return {r["draw"]: (r["trial"], self._json(r["params"], "draws", f"draw {r['draw']}", "params")) for r in rows}

    def meta(self, key: str) -> str | None:
        """A `meta` value (`plan`, `plan_source`, `created`), None when absent."""
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise FleetStoreError(f"{self.path}: not a fleet database ({exc})") from None
        return None if row is None else str(row["value"])

    def agents(self) -> list[AgentRow]:
        """Every agent, in matrix order."""
        rows = self._db.execute("SELECT * FROM agents ORDER BY idx").fetchall()
        return [
            AgentRow(
                r["id"],
                r["idx"],
                r["env"],
                r["preset"],
                self._json(r["overrides"], "agents", f"id {r['id']!r}", "overrides"),
                r["seed"],
                r["tier"],
                r["status"],
                r["error"],
            )
            for r in rows
        ]

    def results(self, tier: int | None = None) -> list[Result]:
        """Scores, of one tier or all, in the order they were recorded."""
        query = "SELECT r.*, a.seed FROM results r JOIN agents a ON a.id = r.agent"
        args: tuple[Any, ...] = ()
        if tier is not None:
            query, args = query + " WHERE r.tier = ?", (tier,)
        rows = self._db.execute(query + " ORDER BY r.t, r.rowid", args).fetchall()
        return [
            Result(r["agent"], r["tier"], r["steps"], r["score"], r["score_std"], r["train_return"], r["seed"], r["t"])
            for r in rows
        ]

    def promotions(self) -> dict[int, set[str]]:
        """The agents promoted out of each tier."""
        out: dict[int, set[str]] = {}
        for row in self._db.execute("SELECT agent, from_tier FROM promotions"):
            out.setdefault(row["from_tier"], set()).add(row["agent"])
        return out

    def lineage(self) -> list[Exploit]:
        """Every PBT exploit, by tier then agent ([] for a fleet without them, or a fleet.db from
        before the table existed)."""
        try:
            rows = self._db.execute("SELECT * FROM lineage ORDER BY tier, agent").fetchall()
        except sqlite3.OperationalError:  # a read-only open of a fleet.db made before the table
            return []
        return [
            Exploit(
                r["agent"],
                r["tier"],
                r["source"],
                r["source_steps"],
                r["checkpoint"],
                self._changes(r),
                r["score"],
                r["source_score"],
                bool(r["applied"]),
            )
            for r in rows
        ]

    def _changes(self, row: sqlite3.Row) -> dict[str, tuple[Any, Any]]:
        """A lineage row's `changes`, {key: (old, new)}; FleetStoreError naming the row otherwise."""
        where = f"agent {row['agent']!r} tier {row['tier']}"
        changes = self._json(row["changes"], "lineage", where, "changes")
        if not all(isinstance(v, list) and len(v) == 2 for v in changes.values()):
            raise FleetStoreError(f"{self.path}: table lineage, row {where}: changes is not {{key: [old, new]}}")
        return {k: (v[0], v[1]) for k, v in changes.items()}
