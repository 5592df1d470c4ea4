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
Each UPDATE's row count is read through a CTE around it: the same single statement.

JavaCosIdRedis is the same service with CosId's Redis distributor (cosid-spring-redis): its
scripts' semantics on its keys, written here from its protocol.

Both wait after a claim, as CosId's ClockBackwardsSynchronizer does, until their clock reaches
the previous holder's stamp (not past it): an id in that very millisecond is CosId's."""

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


class MillisecondSnowflakeId:
    """CosId's MillisecondSnowflakeId (41/10/12 bits, CosId's epoch) on a participant's clock."""

    def __init__(self, instance_id, namespace, machine_bits, safe_guard_ms, clock_offset_ms):
        # This instance's wall clock runs that far from this process's.
        self.clock_offset_ms = clock_offset_ms
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

    def safe_guard_at(self):
        return max(0, self.now() - self.safe_guard_ms)

    def sync(self, previous):
        """ClockBackwardsSynchronizer: waits until this clock reaches `previous` (an error past
        500 ms), then starts from the current time."""
        if previous - self.now() > 500:
            raise RuntimeError(f"ClockTooManyBackwardsException: {previous - self.now()} ms")
        while self.now() < previous:
            time.sleep(0.001)
        self.last_stamp = self.now()

    def next_id(self):
        """MillisecondSnowflakeId's next id: the sequence goes on across milliseconds and
        restarts only past 2047 in a new one; a full one waits."""
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


class JavaCosId(MillisecondSnowflakeId):
    def __init__(self, store, instance_id, namespace="cosid", machine_bits=10,
                 safe_guard_ms=4_000, db="postgres", clock_offset_ms=0):
        super().__init__(instance_id, namespace, machine_bits, safe_guard_ms, clock_offset_ms)
        self.store = store
        self.db = db

    def rows(self, sql):
        return self.store.rows(sql, self.db)

    def updated(self, sql):
        return int(self.store.query(f"WITH u AS ({sql} RETURNING 1) SELECT count(*) FROM u",
                                    self.db))

    def name(self, machine_id):
        return f"{self.namespace}.{machine_id:08d}"

    def distribute(self):
        """The machine id, as CosId distributes it; waits, as CosId does, while the previous
        holder's last_timestamp is ahead of this clock (see sync)."""
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
        self.sync(previous)
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


def distribute_or_error(participant):
    """The machine id, or the SQLSTATE of the statement CosId fails on (23505: two instances
    took the same new machine id)."""
    try:
        return participant.distribute(), None
    except SqlError as error:
        return None, error.sqlstate


# CosId's Redis distributor's scripts, as its protocol says them: keys cosid:{ns}:itc_idx
# (instance id to "machineId|stamp"), cosid:{ns}:adder (from -1), cosid:{ns}:revert (machine id
# to stamp); times from the client. Distribute takes the instance's own entry (stamp raised to
# now), else the first released one (stamp raised to now), else the adder's next while below the
# maximum, else any entry whose stamp <= safeGuardAt; else {-1, -1}.
JAVA_REDIS_DISTRIBUTE = """
local idx = 'cosid:' .. KEYS[1] .. ':itc_idx'
local adder = 'cosid:' .. KEYS[1] .. ':adder'
local revert = 'cosid:' .. KEYS[1] .. ':revert'
local me, max_id = ARGV[1], tonumber(ARGV[2])
local now, safe_guard_at = tonumber(ARGV[3]), tonumber(ARGV[4])
local function split(state)
    local bar = string.find(state, '|', 1, true)
    return tonumber(string.sub(state, 1, bar - 1)), tonumber(string.sub(state, bar + 1))
end
local function keep(id, stamp)
    redis.call('hset', idx, me, tostring(id) .. '|' .. tostring(stamp))
    return {id, stamp}
end
local mine = redis.call('hget', idx, me)
if mine then
    local id, stamp = split(mine)
    return keep(id, math.max(stamp, now))
end
local released = redis.call('hgetall', revert)
if #released > 0 then
    redis.call('hdel', revert, released[1])
    return keep(tonumber(released[1]), math.max(tonumber(released[2]), now))
end
local last = redis.call('get', adder)
if not last then
    redis.call('set', adder, -1)
    last = -1
end
if tonumber(last) < max_id then
    return keep(redis.call('incr', adder), now)
end
local entries = redis.call('hgetall', idx)
for i = 1, #entries, 2 do
    local id, stamp = split(entries[i + 1])
    if stamp <= safe_guard_at then
        redis.call('hdel', idx, entries[i])
        return keep(id, now)
    end
end
return {-1, -1}
"""

JAVA_REDIS_GUARD = """
local idx = 'cosid:' .. KEYS[1] .. ':itc_idx'
local state = redis.call('hget', idx, ARGV[1])
if not state then
    return 0
end
local id = string.sub(state, 1, string.find(state, '|', 1, true) - 1)
redis.call('hset', idx, ARGV[1], id .. '|' .. ARGV[2])
return 1
"""

JAVA_REDIS_REVERT = """
local idx = 'cosid:' .. KEYS[1] .. ':itc_idx'
local state = redis.call('hget', idx, ARGV[1])
if not state then
    return 0
end
redis.call('hdel', idx, ARGV[1])
redis.call('hset', 'cosid:' .. KEYS[1] .. ':revert',
           string.sub(state, 1, string.find(state, '|', 1, true) - 1), ARGV[2])
return 1
"""


class JavaCosIdRedis(MillisecondSnowflakeId):
    """A Java service with CosId's Redis distributor (SpringRedisMachineIdDistributor): the key
    is the namespace as a hash tag, the times this instance's clock."""

    def __init__(self, redis, instance_id, namespace="cosid", machine_bits=10,
                 safe_guard_ms=4_000, clock_offset_ms=0):
        super().__init__(instance_id, namespace, machine_bits, safe_guard_ms, clock_offset_ms)
        self.redis = redis

    def key(self):
        return "{" + self.namespace + "}"

    def distribute(self):
        machine_id, stamp = self.redis.call(
            "EVAL", JAVA_REDIS_DISTRIBUTE, 1, self.key(), self.instance_id,
            (1 << self.machine_bits) - 1, self.now(), self.safe_guard_at())
        if machine_id == -1:
            raise MachineIdOverflow(f"totalMachineIds:[{1 << self.machine_bits}]")
        self.machine_id = machine_id
        self.sync(stamp)
        return machine_id

    def guard(self):
        self.last_stamp = max(self.last_stamp, self.now())
        if not self.redis.call("EVAL", JAVA_REDIS_GUARD, 1, self.key(), self.instance_id,
                               self.last_stamp):
            raise MachineIdLost(self.machine_id)

    def revert(self):
        self.last_stamp = max(self.last_stamp, self.now())
        self.redis.call("EVAL", JAVA_REDIS_REVERT, 1, self.key(), self.instance_id,
                        self.last_stamp)
