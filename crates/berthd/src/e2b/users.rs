//! Who an envd call acts as. E2B's commands and file calls run as the template's user `user` (home
//! `/home/user`) unless the SDK's `user=` names another (`root`): sent as `Authorization: Basic
//! base64("<user>:")` on envd's RPCs and as `?username=` on `/files`. berth runs them as that user of the
//! sandbox's own `/etc/passwd` (`ExecRequest::user`, the files API's `user`). An image without a `user`
//! (one imported into berth, not built as an E2B template) runs them as root, with `HOME=/home/user`.

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use berth_engine::files::Got;
use berth_engine::{Access, Caller, Op};

use super::{E2b, HOME, query_param};

/// The user a call acts as, and its home (where relative paths are, and the default working directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Who {
    /// What berth is asked to act as; `None`: root, for a sandbox that has no `user`.
    pub user: Option<String>,
    pub home: String,
}

impl Who {
    /// A path as E2B users give it: relative ones are in the home directory.
    pub(crate) fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else if path.is_empty() {
            self.home.clone()
        } else {
            format!("{}/{path}", self.home.trim_end_matches('/'))
        }
    }
}

/// The user a request names: envd's Basic authorization (`<user>:`), or `/files`' `username` query.
pub(crate) fn asked(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic ")))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.split_once(':').map_or(s.clone(), |(u, _)| u.to_string()));
    basic.or_else(|| query_param(query, "username")).filter(|u| !u.is_empty())
}

fn home_of(user: &str) -> String {
    match user {
        "root" => "/root".into(),
        "user" => HOME.into(),
        other => format!("/home/{other}"),
    }
}

impl E2b {
    /// Who a call for sandbox `id` acts as: the user it names, else `user` where the sandbox has one.
    pub(crate) async fn who(&self, key: &Caller, id: &str, asked: Option<String>) -> Who {
        if let Some(user) = asked {
            return Who { home: home_of(&user), user: Some(user) };
        }
        let known = self.has_user.lock().unwrap_or_else(|e| e.into_inner()).get(id).copied();
        let has = match known {
            Some(has) => has,
            None => {
                let read = self.engine.read_file(id, None, "/etc/passwd");
                let Ok(Got::File(passwd)) = self.run(key, Access::On(id, Op::ReadFile), read).await else {
                    // Not known now (the sandbox is not running): ask berth for `user`, which says what is wrong.
                    return Who { user: Some("user".into()), home: HOME.into() };
                };
                let passwd = String::from_utf8_lossy(&passwd);
                let named = berth_engine::users::Spec::Name("user".into());
                let has = berth_engine::users::resolve(&named, Some(&passwd)).is_ok();
                // Only a yes is kept: a sandbox may make its `user` later (useradd), and is then asked again.
                if has {
                    self.has_user.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), true);
                }
                has
            }
        };
        Who { user: has.then(|| "user".to_string()), home: HOME.into() }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_user_comes_from_basic_authorization_or_the_query() {
        let mut h = HeaderMap::new();
        assert_eq!(asked(&h, Some("path=a")), None);
        assert_eq!(asked(&h, Some("path=a&username=root")).as_deref(), Some("root"));
        h.insert(header::AUTHORIZATION, "Basic cm9vdDo=".parse().unwrap()); // "root:"
        assert_eq!(asked(&h, None).as_deref(), Some("root"));
        let who = Who { user: Some("root".into()), home: home_of("root") };
        assert_eq!(
            (who.absolute("a/b"), who.absolute(""), who.absolute("/x")),
            ("/root/a/b".into(), "/root".into(), "/x".into())
        );
    }
}
