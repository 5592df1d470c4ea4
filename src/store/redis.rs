//! The Redis server of CosId's Redis distributor (`cosid.distributor = 'cosid_redis'`), reached
//! with the `redis` crate's blocking connection from the worker's own thread. Every call is
//! bounded by a connect, read and write timeout; after a failed call the connection is dropped
//! and made again on the next one. The password of the URL never appears in a message.

use cosid_core::cosid_redis::{script_arg, ScriptTransport};
use cosid_core::protocol::{live_before, Param, StoreError};
use std::time::Duration;

/// Checks a Redis URL without connecting, for the check at server start.
pub fn check(url: &str) -> Result<(), String> {
    redis::Client::open(url).map(|_| ()).map_err(|_| {
        "with cosid.distributor = 'cosid_redis' it must be a Redis URL, redis://[[user]:password@]host[:port][/database] or redis+unix:///path/to/socket".to_string()
    })
}

pub struct RedisStore {
    client: redis::Client,
    connection: Option<redis::Connection>,
    timeout: Duration,
}

impl RedisStore {
    pub fn new(url: &str) -> Result<RedisStore, String> {
        check(url)?;
        Ok(RedisStore {
            client: redis::Client::open(url).map_err(|_| "not a Redis URL".to_string())?,
            connection: None,
            timeout: Duration::from_secs(1),
        })
    }

    /// A message about the server that never holds the URL's password.
    fn failed(&self, why: &redis::RedisError) -> StoreError {
        // Redis before 7 wraps a replica's refusal inside a script's error, whose kind is not
        // ReadOnly: its text still names it.
        if why.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            || why.to_string().contains("READONLY")
        {
            return StoreError::ReadOnly;
        }
        let mut text = why.to_string();
        if let Some(password) = self
            .client
            .get_connection_info()
            .redis_settings()
            .password()
        {
            if !password.is_empty() {
                text = text.replace(password, "********");
            }
        }
        StoreError::failed(format!("the Redis server of cosid.lease_store: {text}"))
    }

    fn connection(&mut self) -> Result<&mut redis::Connection, StoreError> {
        if self.connection.is_none() {
            let connection = self
                .client
                .get_connection_with_timeout(self.timeout)
                .map_err(|why| self.failed(&why))?;
            for set in [
                connection.set_read_timeout(Some(self.timeout)),
                connection.set_write_timeout(Some(self.timeout)),
            ] {
                set.map_err(|why| self.failed(&why))?;
            }
            self.connection = Some(connection);
        }
        Ok(self.connection.as_mut().expect("connected above"))
    }

    fn query(&mut self, command: &redis::Cmd) -> Result<redis::Value, StoreError> {
        let answer = command.query::<redis::Value>(self.connection()?);
        answer.map_err(|why| {
            // A connection that failed a call may be half way through an answer.
            self.connection = None;
            self.failed(&why)
        })
    }
}

impl ScriptTransport for RedisStore {
    fn set_timeout(&mut self, timeout: Duration) {
        if timeout != self.timeout {
            self.timeout = timeout.max(Duration::from_millis(1));
            self.connection = None;
        }
    }

    /// A write that changes nothing: a replica refuses it as read-only.
    fn ping(&mut self) -> Result<(), StoreError> {
        let mut command = redis::cmd("EVAL");
        command
            .arg("return redis.call('del', KEYS[1])")
            .arg(1)
            .arg("cosid:{}:readiness");
        self.query(&command).map(|_| ())
    }

    fn eval(
        &mut self,
        script: &'static str,
        key: &str,
        args: &[Param],
    ) -> Result<Vec<i64>, StoreError> {
        // Connected first: whether a holder still generates is decided as the call is sent, to
        // end within its timeout.
        self.connection()?;
        let now_ms = crate::host::boottime_ms();
        let round_trip_ms = self.timeout.as_millis() as u64;
        let args: Vec<String> = args
            .iter()
            .map(|arg| {
                script_arg(arg, |deadline_ms| {
                    live_before(deadline_ms, now_ms, round_trip_ms)
                })
            })
            .collect();
        let mut command = redis::cmd("EVAL");
        command.arg(script).arg(1).arg(key).arg(&args);
        let answer = self.query(&command)?;
        let integer = |value: &redis::Value| match value {
            redis::Value::Int(n) => Some(*n),
            _ => None,
        };
        let integers = match &answer {
            redis::Value::Array(values) => values.iter().map(integer).collect(),
            single => integer(single).map(|n| vec![n]),
        };
        integers.ok_or_else(|| {
            StoreError::failed(format!(
                "the Redis server of cosid.lease_store answered {answer:?} to cosid's script"
            ))
        })
    }
}
