//! The proxy end to end: a local listener hands accepted sockets to `Proxy::serve`, and test servers on
//! 127.0.0.1 play the destinations (reached through `add_hosts` and exact-IP rules, since loopback is
//! refused by default).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod common;
mod connect;
mod http;
mod intercept;
mod limits;
mod live;
