//! Tenants sharing one daemon, as their tokens meet it over TCP: a tenant's token reaches its own sandboxes,
//! snapshots, volumes and secrets only (another tenant's are answered as what does not exist), a read-only
//! token changes nothing, a token with a label selector reaches the sandboxes with those labels only, and a
//! tenant's quota is held at create and live. The cross-tenant suite tries every route of the API, the E2B
//! control plane and a sandbox's own session token against another tenant's sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, tcp_http};
use common::text;
use serde_json::{Value, json};

/// One request to the TCP listener: (status, JSON body, or the text as a JSON string when it is not JSON).
fn call(addr: &str, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let (status, answer) = tcp_http(addr, method, path, Some(token), &body);
    (status, serde_json::from_str(&answer).unwrap_or(Value::String(answer)))
}

/// Make a tenant over the unix socket (an operator's call) and mint a token for it.
fn tenant(d: &Daemon, name: &str, quota: Value) -> String {
    let (status, body) = d.http("POST", "/v1/tenants", &json!({"name": name, "quota": quota}).to_string());
    assert!(status == 201 || status == 200, "{status} {body}");
    mint(d, json!({"name": name, "tenant": name}))
}

fn mint(d: &Daemon, req: Value) -> String {
    let (status, body) = d.http("POST", "/v1/tokens", &req.to_string());
    assert_eq!(status, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["token"].as_str().unwrap().to_string()
}

fn create(addr: &str, token: &str, req: Value) -> String {
    let (status, body) = call(addr, token, "POST", "/v1/sandboxes", req);
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

/// Run `argv` in sandbox `id` with `token`, its proxy left out; what it printed on stdout.
fn run(addr: &str, token: &str, id: &str, argv: &[&str]) -> String {
    run_with(addr, token, id, argv, json!({"no_proxy": "*"}))
}

/// Run `argv` in sandbox `id` with `token` and environment `env`; what it printed on stdout.
fn run_with(addr: &str, token: &str, id: &str, argv: &[&str], env: Value) -> String {
    let body = json!({"argv": argv, "env": env}).to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST /v1/sandboxes/{id}/execs HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let (head, rest) = (text(&resp[..split]), &resp[split + 4..]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{}", text(rest));
    let lines =
        if head.to_ascii_lowercase().contains("chunked") { common::daemon::dechunk(rest) } else { rest.to_vec() };
    text(&lines)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|f| f["type"] == "output" && f["stream"] == "stdout")
        .map(|f| f["data"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn exec(addr: &str, token: &str, id: &str, script: &str) -> String {
    run(addr, token, id, &["sh", "-c", script])
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every route of the API that names a sandbox, each as a request another tenant might try.
fn routes_on(id: &str) -> Vec<(&'static str, String, Value)> {
    let s = |tail: &str| format!("/v1/sandboxes/{id}{tail}");
    vec![
        ("GET", s(""), Value::Null),
        ("DELETE", s(""), Value::Null),
        ("POST", s("/execs"), json!({"argv": ["true"]})),
        ("GET", s("/execs"), Value::Null),
        ("DELETE", s("/execs/x1"), Value::Null),
        ("GET", s("/execs/x1/log"), Value::Null),
        ("POST", s("/execs/x1/stdin"), json!({"data": "x"})),
        ("GET", s("/files?path=/etc/hostname"), Value::Null),
        ("PUT", s("/files?path=/tmp/x"), json!("x")),
        ("DELETE", s("/files?path=/tmp/x"), Value::Null),
        ("GET", s("/stat?path=/etc"), Value::Null),
        ("POST", s("/mkdir"), json!({"path": "/tmp/d"})),
        ("POST", s("/move"), json!({"from": "/tmp/a", "to": "/tmp/b"})),
        ("GET", s("/watch?path=/tmp&timeout_seconds=0.2"), Value::Null),
        ("GET", s("/archive?path=/etc"), Value::Null),
        ("GET", s("/shell"), Value::Null),
        ("GET", s("/journal"), Value::Null),
        ("GET", s("/receipt"), Value::Null),
        ("GET", s("/diff"), Value::Null),
        ("GET", s("/net/log"), Value::Null),
        ("GET", s("/net/suggest"), Value::Null),
        ("POST", s("/net"), json!({"allow": ["example.com"]})),
        ("GET", s("/usage"), Value::Null),
        ("GET", s("/usage/history"), Value::Null),
        ("POST", s("/budget"), json!({"cpu_seconds": 1})),
        ("POST", s("/ttl"), json!({"ttl_seconds": 1})),
        ("POST", s("/fork"), json!({})),
        ("POST", s("/snapshots"), json!({})),
        ("POST", s("/pause"), json!({})),
        ("POST", s("/resume"), json!({})),
        ("POST", s("/hibernate"), json!({})),
        ("POST", s("/wake"), json!({})),
        ("POST", s("/stop"), json!({})),
        ("POST", s("/start"), json!({})),
        ("POST", s("/rebuild"), json!({})),
        ("POST", s("/reset"), json!({})),
        ("POST", s("/restore"), json!({"snapshot": "x"})),
        ("GET", s("/contexts"), Value::Null),
        ("POST", s("/contexts"), json!({"language": "python"})),
        ("GET", s("/previews"), Value::Null),
        ("POST", s("/previews"), json!({"port": 8000})),
    ]
}

#[test]
fn a_tenants_token_reaches_its_own_tenant_and_nothing_of_another() {
    let e2b_port = common::free_port();
    let e2b = format!("127.0.0.1:{e2b_port}");
    let (d, addr) = Daemon::start_with_tcp(&["--e2b-listen", &e2b]);
    let (ta, tb) = (tenant(&d, "alpha", json!({})), tenant(&d, "beta", json!({})));
    let a = create(&addr, &ta, json!({}));
    let b = create(&addr, &tb, json!({"labels": {"app": "b"}}));
    let (_, rec) = call(&addr, &ta, "GET", &format!("/v1/sandboxes/{a}"), Value::Null);
    assert_eq!(rec["tenant"], "alpha", "{rec}");

    // Every route on beta's sandbox, with alpha's token: as if it did not exist.
    for (method, path, body) in routes_on(&b) {
        let (status, answer) = call(&addr, &ta, method, &path, body);
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "not_found", "{method} {path}: {answer}");
        assert_eq!(answer["error"]["message"], format!("there is no sandbox {b:?}"), "{method} {path}");
    }
    // The same routes on its own sandbox are not refused by the tenancy check (a few, for the contrast).
    assert_eq!(exec(&addr, &ta, &a, "echo mine"), "mine\n");
    // Beta's sandbox is untouched by all of that.
    assert_eq!(exec(&addr, &tb, &b, "echo still"), "still\n");

    // Lists hold its own only.
    for path in ["/v1/sandboxes", "/v1/usage", "/v1/events", "/metrics"] {
        let (status, body) = call(&addr, &ta, "GET", path, Value::Null);
        assert_eq!(status, 200, "{path}");
        let shown = body.to_string();
        assert!(!shown.contains(&b), "{path} shows beta's sandbox: {shown}");
        if path != "/v1/events" {
            assert!(shown.contains(&a), "{path} lacks its own sandbox: {shown}");
        }
    }
    let (_, metrics) = call(&addr, &ta, "GET", "/metrics", Value::Null);
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(metrics.contains("berth_tenant_sandboxes{tenant=\"alpha\"} 1"), "{metrics}");
    assert!(!metrics.contains("beta"), "{metrics}");
    let (_, tenants) = call(&addr, &ta, "GET", "/v1/tenants", Value::Null);
    assert_eq!(tenants.as_array().unwrap().len(), 1, "{tenants}");
    assert_eq!(call(&addr, &ta, "GET", "/v1/tenants/beta", Value::Null).0, 404);

    // Snapshots: beta's are not alpha's to list, read, remove, start from or restore.
    let (status, snap) = call(&addr, &tb, "POST", &format!("/v1/sandboxes/{b}/snapshots"), json!({}));
    assert_eq!(status, 201, "{snap}");
    let sb = snap["id"].as_str().unwrap().to_string();
    let (_, listed) = call(&addr, &ta, "GET", "/v1/snapshots", Value::Null);
    assert!(!listed.to_string().contains(&sb), "{listed}");
    assert_eq!(call(&addr, &ta, "GET", &format!("/v1/snapshots/{sb}"), Value::Null).0, 404);
    assert_eq!(call(&addr, &ta, "DELETE", &format!("/v1/snapshots/{sb}"), Value::Null).0, 404);
    assert_eq!(call(&addr, &ta, "POST", "/v1/sandboxes", json!({"from_snapshot": sb})).0, 404);
    let restore = call(&addr, &ta, "POST", &format!("/v1/sandboxes/{a}/restore"), json!({"snapshot": sb}));
    assert_eq!(restore.0, 404, "{}", restore.1);
    let (_, listed) = call(&addr, &tb, "GET", "/v1/snapshots", Value::Null);
    assert!(listed.to_string().contains(&sb), "beta lists its own: {listed}");

    // Volumes: beta's is not alpha's to list, mount or remove.
    let (status, vol) = call(&addr, &tb, "POST", "/v1/volumes", json!({"name": "beta-data"}));
    assert_eq!(status, 201, "{vol}");
    assert_eq!(vol["tenant"], "beta");
    let (_, vols) = call(&addr, &ta, "GET", "/v1/volumes", Value::Null);
    assert!(!vols.to_string().contains("beta-data"), "{vols}");
    let mounted =
        call(&addr, &ta, "POST", "/v1/sandboxes", json!({"volumes": [{"name": "beta-data", "target": "/data"}]}));
    assert_eq!(mounted.0, 404, "{}", mounted.1);
    assert_eq!(call(&addr, &ta, "DELETE", "/v1/volumes/beta-data", Value::Null).0, 404);

    // Secrets: an operator sets one for beta; alpha can neither see nor declare it.
    let (status, body) = d.http("PUT", "/v1/secrets/BETA_KEY?tenant=beta", "s3cret-of-beta");
    assert_eq!(status, 200, "{body}");
    let (_, alpha_secrets) = call(&addr, &ta, "GET", "/v1/secrets", Value::Null);
    assert_eq!(alpha_secrets, json!([]), "{alpha_secrets}");
    let (_, beta_secrets) = call(&addr, &tb, "GET", "/v1/secrets", Value::Null);
    assert!(beta_secrets.to_string().contains("BETA_KEY"), "{beta_secrets}");
    let declared = call(&addr, &ta, "POST", "/v1/sandboxes", json!({"secrets": ["BETA_KEY"]}));
    assert_eq!(declared.0, 404, "{}", declared.1);
    let with_secret = create(&addr, &tb, json!({"secrets": ["BETA_KEY"]}));
    let shown = exec(&addr, &tb, &with_secret, "test \"$BETA_KEY\" = s3cret-of-beta && echo has-it");
    assert_eq!(shown, "has-it\n");

    // A tenant's token creates in its own tenant only, and makes no operator's call.
    let elsewhere = call(&addr, &ta, "POST", "/v1/sandboxes", json!({"tenant": "beta"}));
    assert_eq!(elsewhere.0, 403, "{}", elsewhere.1);
    // Nor may it mount a host path, which reaches past every tenant (the daemon's own files among them).
    let root = d.root().display().to_string();
    let host = call(
        &addr,
        &ta,
        "POST",
        "/v1/sandboxes",
        json!({"mounts": [{"host": root, "target": "/h", "readonly": true}]}),
    );
    assert_eq!(host.0, 403, "{}", host.1);
    assert!(host.1["error"]["message"].as_str().unwrap().contains("mounts of host paths"), "{}", host.1);
    for (method, path) in [("GET", "/v1/pods"), ("GET", "/v1/storage"), ("GET", "/v1/cluster"), ("POST", "/v1/tenants")]
    {
        let (status, answer) = call(&addr, &ta, method, path, json!({"name": "x"}));
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden");
    }

    // Alpha's sandbox's own session token stays within alpha too.
    let probe = format!(
        "import json, os, urllib.request, urllib.error\n\
         r = urllib.request.Request(os.environ['BERTH_API'] + '/v1/sandboxes/{b}', \
         headers={{'Authorization': 'Bearer ' + os.environ['BERTH_TOKEN']}})\n\
         try:\n    urllib.request.urlopen(r, timeout=5); print('reached')\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n"
    );
    let code = run(&addr, &ta, &a, &["python3", "-c", &probe]).trim().to_string();
    assert!(code == "401" || code == "404", "a session token of alpha reached beta: {code}");

    // The E2B control plane, with alpha's token as its API key.
    let e2b_call = |method: &str, path: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(&e2b).unwrap();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: api.e2b\r\nX-API-Key: {ta}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let status = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, resp)
    };
    let (status, listed) = e2b_call("GET", "/v2/sandboxes");
    assert_eq!(status, 200, "{listed}");
    assert!(listed.contains(&a) && !listed.contains(&b), "{listed}");
    let (status, answer) = e2b_call("GET", &format!("/sandboxes/{b}"));
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = e2b_call("DELETE", &format!("/sandboxes/{b}"));
    assert_eq!(status, 404, "{answer}");
    assert_eq!(exec(&addr, &tb, &b, "echo intact"), "intact\n");

    // A tenant is removed only once it has no sandboxes, and its tokens go with it.
    let (status, body) = d.http("DELETE", "/v1/tenants/alpha", "");
    assert_eq!(status, 409, "{body}");
    assert_eq!(call(&addr, &ta, "DELETE", &format!("/v1/sandboxes/{a}"), Value::Null).0, 200);
    let (status, body) = d.http("DELETE", "/v1/tenants/alpha", "");
    assert_eq!(status, 204, "{body}");
    assert_eq!(call(&addr, &ta, "GET", "/v1/sandboxes", Value::Null).0, 401);

    // Beta still holds a snapshot and a volume after its sandboxes go: its removal names them, and once they
    // are gone its secrets go with it, so a tenant made later with its name inherits nothing.
    for id in [&b, &with_secret] {
        assert_eq!(call(&addr, &tb, "DELETE", &format!("/v1/sandboxes/{id}"), Value::Null).0, 200);
    }
    let (status, body) = d.http("DELETE", "/v1/tenants/beta", "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("1 snapshot(s)") && body.contains("1 volume(s)"), "{body}");
    assert_eq!(call(&addr, &tb, "DELETE", &format!("/v1/snapshots/{sb}"), Value::Null).0, 200);
    assert_eq!(call(&addr, &tb, "DELETE", "/v1/volumes/beta-data", Value::Null).0, 200);
    assert_eq!(d.http("DELETE", "/v1/tenants/beta", "").0, 204);
    let tb = tenant(&d, "beta", json!({}));
    let (_, secrets) = call(&addr, &tb, "GET", "/v1/secrets", Value::Null);
    assert_eq!(secrets, json!([]), "a new tenant beta inherited the old one's secrets: {secrets}");
    // Secrets of a tenant that does not exist are a 404, and asking makes nothing.
    let (status, body) = d.http("GET", "/v1/secrets?tenant=nobody", "");
    assert_eq!(status, 404, "{body}");
    assert!(!d.root().join("tenants/nobody").exists());
}

#[test]
fn a_read_only_token_looks_and_a_selector_token_reaches_its_labels_only() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let owner = tenant(&d, "gamma", json!({}));
    let looker = mint(&d, json!({"name": "looker", "tenant": "gamma", "read_only": true}));
    let team = mint(&d, json!({"name": "team-x", "tenant": "gamma", "selector": {"team": "x"}}));
    let plain = create(&addr, &owner, json!({}));
    exec(&addr, &owner, &plain, "echo hi > /tmp/note");

    // Read-only: every reading request is served, nothing that changes anything is.
    for path in [
        format!("/v1/sandboxes/{plain}"),
        format!("/v1/sandboxes/{plain}/files?path=/tmp/note"),
        format!("/v1/sandboxes/{plain}/execs"),
        format!("/v1/sandboxes/{plain}/journal"),
        "/v1/sandboxes".to_string(),
    ] {
        let (status, body) = call(&addr, &looker, "GET", &path, Value::Null);
        assert_eq!(status, 200, "{path}: {body}");
    }
    for (method, path, body) in routes_on(&plain).into_iter().filter(|(m, p, _)| *m != "GET" || p.ends_with("/shell")) {
        let (status, answer) = call(&addr, &looker, method, &path, body);
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("read-only"), "{answer}");
    }
    assert_eq!(call(&addr, &looker, "POST", "/v1/sandboxes", json!({})).0, 403);
    assert_eq!(call(&addr, &owner, "GET", &format!("/v1/sandboxes/{plain}/files?path=/tmp/note"), Value::Null).0, 200);

    // A selector: its creates carry its labels, it reaches those only, and it cannot label otherwise.
    let labelled = create(&addr, &team, json!({}));
    let (_, rec) = call(&addr, &team, "GET", &format!("/v1/sandboxes/{labelled}"), Value::Null);
    assert_eq!(rec["labels"]["team"], "x", "{rec}");
    assert_eq!(rec["tenant"], "gamma");
    assert_eq!(call(&addr, &team, "GET", &format!("/v1/sandboxes/{plain}"), Value::Null).0, 404);
    assert_eq!(call(&addr, &team, "POST", &format!("/v1/sandboxes/{plain}/execs"), json!({"argv": ["true"]})).0, 404);
    let (_, listed) = call(&addr, &team, "GET", "/v1/sandboxes", Value::Null);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![labelled.as_str()], "{listed}");
    let (status, answer) = call(&addr, &team, "POST", "/v1/sandboxes", json!({"labels": {"team": "y"}}));
    assert_eq!(status, 403, "{answer}");
    // The tenant's own token still sees both.
    let (_, all) = call(&addr, &owner, "GET", "/v1/sandboxes", Value::Null);
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");

    // A token for a tenant that does not exist is not minted.
    let (status, body) = d.http("POST", "/v1/tokens", &json!({"name": "x", "tenant": "nobody"}).to_string());
    assert_eq!(status, 404, "{body}");
    let out = d.berth(&["token", "ls"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("tenant=gamma,read-only") && shown.contains("selector:team=x"), "{shown}");
}

#[test]
fn a_tenants_quota_is_held_at_create_and_live() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let t = tenant(&d, "delta", json!({"sandboxes": 3, "cpus": 1.5, "memory_bytes": 2u64 << 30}));
    let big = create(&addr, &t, json!({"cpus": 1.0, "memory_bytes": 1u64 << 30}));
    let (status, answer) = call(&addr, &t, "POST", "/v1/sandboxes", json!({"cpus": 1.0, "memory_bytes": 256u64 << 20}));
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["code"], "quota_exceeded");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("tenant delta") && message.contains("cpus"), "{message}");
    // Without a limit of its own, a sandbox gets its share of what is left.
    let small = create(&addr, &t, json!({"memory_bytes": 1u64 << 30}));
    let (_, rec) = call(&addr, &t, "GET", &format!("/v1/sandboxes/{small}"), Value::Null);
    assert_eq!(rec["cpus"], 0.5, "{rec}");
    let (status, answer) = call(&addr, &t, "POST", "/v1/sandboxes", json!({"memory_bytes": 256u64 << 20}));
    assert_eq!(status, 429, "{answer}");
    // A fork is a create too.
    let (status, answer) = call(&addr, &t, "POST", &format!("/v1/sandboxes/{small}/fork"), json!({}));
    assert_eq!(status, 429, "{answer}");
    // Removing one makes room.
    assert_eq!(call(&addr, &t, "DELETE", &format!("/v1/sandboxes/{big}"), Value::Null).0, 200);
    let (status, answer) = call(&addr, &t, "POST", "/v1/sandboxes", json!({"cpus": 0.5, "memory_bytes": 3u64 << 29}));
    assert_eq!(status, 429, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("memory"), "{answer}");
    create(&addr, &t, json!({"cpus": 0.5, "memory_bytes": 512u64 << 20}));
    let (_, mine) = call(&addr, &t, "GET", "/v1/tenants/delta", Value::Null);
    assert_eq!(mine["used"]["sandboxes"], 2, "{mine}");
    assert_eq!(mine["used"]["memory_bytes"], (1u64 << 30) + (512u64 << 20), "{mine}");
    // The operator sees every tenant's use and quota in /metrics.
    let (_, metrics) = d.http("GET", "/metrics", "");
    assert!(metrics.contains("berth_tenant_quota_sandboxes{tenant=\"delta\"} 3"), "{metrics}");

    // Egress: past the quota every sandbox of the tenant is closed, live; raising the quota opens it again.
    let e = tenant(&d, "epsilon", json!({"egress_bytes": 100_000}));
    let port = common::upstream(60_000);
    let net = json!({"allow": [format!("up.test:{port}")], "add_hosts": {"up.test": "127.0.0.1"}});
    let id = create(&addr, &e, json!({"network": net}));
    let fetch = format!(
        "import urllib.request, urllib.error\n\
         try:\n    print(len(urllib.request.urlopen('http://up.test:{port}/', timeout=10).read()))\n\
         except urllib.error.HTTPError as err:\n    print(err.code, err.read().decode())\n"
    );
    let fetched = |script: &str| run_with(&addr, &e, &id, &["python3", "-c", script], json!({})).trim().to_string();
    assert_eq!(fetched(&fetch), "60000");
    assert_eq!(fetched(&fetch), "60000");
    let refused = wait_for("the tenant's egress to close", || {
        let out = fetched(&fetch);
        out.starts_with("403").then_some(out)
    });
    assert!(refused.contains("egress quota"), "{refused}");
    let (status, answer) = call(&addr, &e, "POST", "/v1/sandboxes", json!({}));
    assert_eq!(status, 429, "{answer}");
    let (status, body) =
        d.http("POST", "/v1/tenants", &json!({"name": "epsilon", "quota": {"egress_bytes": 10_000_000}}).to_string());
    assert_eq!(status, 200, "{body}");
    wait_for("the tenant's egress to open again", || (fetched(&fetch) == "60000").then_some(()));
}
