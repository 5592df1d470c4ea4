"""A Java service's CosId (3.2.1) as its JDBC machine-id distributor and MillisecondSnowflakeId
run, standing for one in the tests: CosId's statements on cosid_machine in its order, each in
autocommit, its claimer's clock (this process's) and safe guard, and its ids. Statement by
statement, as CosId's JdbcMachineIdDistributor sends them:
- own row: select machine_id, last_timestamp ... where namespace=? and instance_id=? and
  last_timestamp>?, then its guard;
- released or expired rows: select ... where namespace=? and (instance_id='' or
  last_timestamp<=?), each tried with update ... set instance_id=?,last_timestamp=?,
  distribute_time=? where name=? and (instance_id='' or last_timestamp<=?);
- a new one: select max(machine_id)+1 ..., then insert ... values (?,?,?,?,?,?,0); a duplicate
  key there is an error on PostgreSQL (pgjdbc's PSQLException is no
  SQLIntegrityConstraintViolationException, the only one CosId retries);
- guard: update ... set last_timestamp=? where namespace=? and instance_id=? and machine_id=?
  (no row: the machine id is lost, and CosId keeps generating);
- revert: update ... set instance_id=?,last_timestamp=?,revert_time=? where namespace=? and
  instance_id=?.
Each UPDATE's row count is read through a CTE around it: the same single statement."""

import time

from .pgcluster import SqlError

COSID_EPOCH_MS = 1_577_203_200_000


def now_ms():
    return time.time_ns() // 1_000_000


def literal(text):
    return "'" + text.replace("'", "''") + "'"


class MachineIdOverflow(Exception):
    pass


class MachineIdLost(Exception):
    pass


class JavaCosId:
    def __init__(self, store, instance_id, namespace="cosid", machine_bits=10,
                 safe_guard_ms=4_000, db="postgres", clock_offset_ms=0):
        self.store = store
        # This instance's wall clock runs that far from this process's.
        self.clock_offset_ms = clock_offset_ms
        self.db = db
        self.instance_id = instance_id
        self.namespace = namespace
        self.machine_bits = machine_bits
        self.safe_guard_ms = safe_guard_ms
        self.machine_id = None
        self.last_stamp = 0
        # MillisecondSnowflakeId's state.
        self.last_timestamp = -1
        self.sequence = 0

    def now(self):
        return now_ms() + self.clock_offset_ms

    def rows(self, sql):
        return self.store.rows(sql, self.db)

    def updated(self, sql):
        return int(self.store.query(f"WITH u AS ({sql} RETURNING 1) SELECT count(*) FROM u",
                                    self.db))

    def name(self, machine_id):
        return f"{self.namespace}.{machine_id:08d}"

    def safe_guard_at(self):
        return max(0, self.now() - self.safe_guard_ms)

    def distribute(self):
        """The machine id, as CosId distributes it; waits, as CosId does, while the previous
        holder's last_timestamp is ahead of this clock (up to 500 ms; more is an error CosId
        throws after the row was claimed)."""
        ns, me = literal(self.namespace), literal(self.instance_id)
        own = self.rows("select machine_id, last_timestamp from cosid_machine where "
                        f"namespace={ns} and instance_id={me} and "
                        f"last_timestamp>{self.safe_guard_at()}")
        if own:
            self.machine_id = int(own[0][0])
            self.last_stamp = max(int(own[0][1]), self.now())
            self.guard()
            return self.machine_id
        previous = None
        for machine_id, last_timestamp in self.rows(
                "select machine_id, last_timestamp from cosid_machine where "
                f"namespace={ns} and (instance_id='' or "
                f"last_timestamp<={self.safe_guard_at()})"):
            stamp = self.now()
            if self.updated(f"update cosid_machine set instance_id={me},last_timestamp={stamp},"
                            f"distribute_time={self.now()} where "
                            f"name={literal(self.name(int(machine_id)))} and "
                            f"(instance_id='' or last_timestamp<={self.safe_guard_at()})"):
                self.machine_id = int(machine_id)
                previous = int(last_timestamp)
                break
        if self.machine_id is None:
            # JDBC's getInt reads SQL NULL (an empty namespace) as 0.
            next_id = int(self.store.query("select max(machine_id)+1 as next_machine_id from "
                                           f"cosid_machine where namespace={ns}", self.db) or 0)
            if next_id > (1 << self.machine_bits) - 1:
                raise MachineIdOverflow(f"totalMachineIds:[{1 << self.machine_bits}]")
            stamp = self.now()
            self.store.query(
                "insert into cosid_machine (name, namespace, machine_id, last_timestamp, "
                f"instance_id, distribute_time, revert_time) values "
                f"({literal(self.name(next_id))},{ns},{next_id},{stamp},{me},{self.now()},0);",
                self.db)
            self.machine_id = next_id
            previous = stamp
        if previous - self.now() > 500:
            raise RuntimeError(f"ClockTooManyBackwardsException: {previous - self.now()} ms")
        while self.now() <= previous:
            time.sleep(0.001)
        self.last_stamp = self.now()
        return self.machine_id

    def guard(self):
        self.last_stamp = max(self.last_stamp, self.now())
        if not self.updated(f"update cosid_machine set last_timestamp={self.last_stamp} where "
                            f"namespace={literal(self.namespace)} and "
                            f"instance_id={literal(self.instance_id)} and "
                            f"machine_id={self.machine_id}"):
            raise MachineIdLost(self.machine_id)

    def revert(self):
        self.last_stamp = max(self.last_stamp, self.now())
        self.updated(f"update cosid_machine set instance_id='',last_timestamp={self.last_stamp},"
                     f"revert_time={self.now()} where namespace={literal(self.namespace)} and "
                     f"instance_id={literal(self.instance_id)}")

    def next_id(self):
        """MillisecondSnowflakeId's next id (41/10/12 bits, CosId's epoch): the sequence goes on
        across milliseconds and restarts only past 2047 in a new one; a full one waits."""
        timestamp = self.now()
        if timestamp < self.last_timestamp:
            raise RuntimeError("ClockBackwardsException")
        if timestamp > self.last_timestamp and self.sequence >= 2047:
            self.sequence = 0
        self.sequence = (self.sequence + 1) & 0xFFF
        if self.sequence == 0 and timestamp == self.last_timestamp:
            while timestamp <= self.last_timestamp:
                timestamp = self.now()
        self.last_timestamp = timestamp
        return ((timestamp - COSID_EPOCH_MS) << 22) | (self.machine_id << 12) | self.sequence

    def ids(self, count):
        return [self.next_id() for _ in range(count)]


def distribute_or_error(participant):
    """The machine id, or the SQLSTATE of the statement CosId fails on (23505: two instances
    took the same new machine id)."""
    try:
        return participant.distribute(), None
    except SqlError as error:
        return None, error.sqlstate
