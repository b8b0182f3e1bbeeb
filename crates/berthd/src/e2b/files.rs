//! envd's `/files`: `GET` reads a file, `POST` writes one or several (multipart form data, one part per file,
//! or one raw `application/octet-stream` body, gzip-encoded or not), each through berth's files API. Relative
//! paths are in `/home/user`; parent directories are made.

use std::io::Read;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use berth_engine::files::Got;
use berth_engine::{Access, Caller, Op};
use serde_json::{Value, json};

use super::users::Who;
use super::{E2b, error, query_param};

pub(super) async fn serve(s: &E2b, key: &Caller, id: &str, who: &Who, req: Request) -> Response {
    let query = req.uri().query().map(str::to_string);
    let path = query_param(query.as_deref(), "path").map(|p| who.absolute(&p));
    match *req.method() {
        Method::GET => {
            let Some(path) = path else { return error(400, "GET /files needs ?path=") };
            let read = s.engine.read_file(id, who.user.as_deref(), &path);
            match s.run(key, Access::On(id, Op::ReadFile), read).await {
                Ok(Got::File(data)) => ([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response(),
                Ok(Got::Dir(entries)) => axum::Json(entries).into_response(),
                Err(f) => error(f.file_status(), f.message),
            }
        }
        Method::POST => upload(s, key, id, who, path, req).await,
        ref m => error(405, format!("/files takes GET and POST, not {m}")),
    }
}

async fn upload(s: &E2b, key: &Caller, id: &str, who: &Who, path: Option<String>, req: Request) -> Response {
    let headers = req.headers().clone();
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let gzip = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(|e| e.contains("gzip"));
    let body = match axum::body::to_bytes(req.into_body(), berth_engine::files::MAX_FILE as usize * 2).await {
        Ok(b) => b,
        Err(_) => return error(413, format!("an upload is at most {} bytes", berth_engine::files::MAX_FILE)),
    };
    let body = if gzip {
        let mut out = Vec::new();
        match flate2::read::GzDecoder::new(&body[..]).take(berth_engine::files::MAX_FILE + 1).read_to_end(&mut out) {
            Ok(_) => Bytes::from(out),
            Err(e) => return error(400, format!("the body is not gzip: {e}")),
        }
    } else {
        body
    };
    let files: Vec<(String, Bytes)> =
        if let Some(boundary) = kind.strip_prefix("multipart/form-data").and_then(boundary_of) {
            match parts(&body, &boundary) {
                Ok(ps) => ps
                    .into_iter()
                    .filter_map(|(name, data)| path.clone().or(name.map(|n| who.absolute(&n))).map(|p| (p, data)))
                    .collect(),
                Err(e) => return error(400, e),
            }
        } else {
            let Some(path) = path else { return error(400, "an octet-stream upload needs ?path=") };
            vec![(path, body)]
        };
    if files.is_empty() {
        return error(400, "no file in the upload (one part named file, with its path as its filename)");
    }
    let mut written: Vec<Value> = Vec::new();
    for (path, data) in files {
        // Each file holds its place in the daemon's budget for uploads while it is written, as the API's do.
        let place = match crate::files_http::hold(Some(data.len() as u64)).await {
            Ok(place) => place,
            Err(f) => {
                let f = super::Failed::from(f);
                return error(f.status, f.message);
            }
        };
        let write = s.engine.write_file(id, who.user.as_deref(), &path, data.to_vec(), None, true);
        let written_one = s.run(key, Access::On(id, Op::WriteFile), write).await;
        drop(place);
        if let Err(f) = written_one {
            return error(f.file_status(), f.message);
        }
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        written.push(json!({"name": name, "type": "file", "path": path}));
    }
    axum::Json(written).into_response()
}

/// The boundary of a `multipart/form-data` content type's parameters (`; boundary=…`).
fn boundary_of(params: &str) -> Option<String> {
    params.split(';').find_map(|p| p.trim().strip_prefix("boundary=").map(|b| b.trim_matches('"').to_string()))
}

/// The parts of a multipart body: each one's filename and content.
fn parts(body: &[u8], boundary: &str) -> Result<Vec<(Option<String>, Bytes)>, String> {
    let delimiter = format!("--{boundary}");
    let d = delimiter.as_bytes();
    let find = |hay: &[u8], from: usize| hay[from..].windows(d.len()).position(|w| w == d).map(|i| i + from);
    let mut at = find(body, 0).ok_or("a multipart body without its boundary")? + d.len();
    let mut out = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            return Ok(out);
        }
        let start = at + if body[at..].starts_with(b"\r\n") { 2 } else { 0 };
        let next = find(body, start).ok_or("a multipart part without its closing boundary")?;
        let part = &body[start..next];
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let split = part.windows(4).position(|w| w == b"\r\n\r\n").ok_or("a multipart part without headers")?;
        let head = String::from_utf8_lossy(&part[..split]).to_string();
        let filename = head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition")).and_then(|l| {
            l.split(';').find_map(|p| p.trim().strip_prefix("filename=").map(|f| f.trim_matches('"').to_string()))
        });
        out.push((filename, Bytes::copy_from_slice(&part[split + 4..])));
        at = next + d.len();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn multipart_bodies_are_split_into_their_files() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a/b.txt\"\r\nContent-Type: \
                     application/octet-stream\r\n\r\nhello\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; \
                     filename=\"/c\"\r\n\r\n\r\n--XyZ--\r\n";
        let ps = parts(body, "XyZ").unwrap();
        assert_eq!(ps, vec![(Some("a/b.txt".into()), Bytes::from("hello")), (Some("/c".into()), Bytes::new())]);
        assert_eq!(boundary_of("; boundary=\"XyZ\"").as_deref(), Some("XyZ"));
        assert!(parts(b"nothing", "XyZ").is_err());
    }
}
