//! Images: the built-in `host` image, and root file systems imported from a directory, a tarball, an OCI
//! image layout or a `docker save` archive. An imported image is `<root>/images/<name>/rootfs` (its files
//! stored under berth's storage ids) beside `image.json`, its description; it is read-only and shared by
//! every sandbox built from it, and cannot be removed while one is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_api::{Image, ImportFrame, ImportImage, RejectedEntry};
use berth_runtime::image::{IMPORTED_META, IMPORTED_ROOTFS};
use tokio::sync::mpsc;

use super::{Engine, now_ms};
use crate::EngineError;

impl Engine {
    fn images_dir(&self) -> PathBuf {
        self.root.join("images")
    }

    /// Which sandboxes (running or stopped) are built from each image.
    fn image_users(&self) -> Result<Vec<(String, String)>, EngineError> {
        Ok(self
            .store
            .specs()?
            .into_iter()
            .map(|(id, spec)| (id, spec["image"].as_str().unwrap_or("host").to_string()))
            .collect())
    }

    pub fn images(&self) -> Result<Vec<Image>, EngineError> {
        let users = self.image_users()?;
        let used_by = |name: &str| users.iter().filter(|(_, i)| i == name).map(|(id, _)| id.clone()).collect();
        let mut out = vec![Image {
            name: "host".into(),
            kind: "host".into(),
            created_at_ms: 0,
            layers: 1,
            files: 0,
            bytes: 0,
            rejected: vec![],
            env: vec![],
            cmd: vec![],
            workdir: None,
            used_by: used_by("host"),
            tenant: None,
        }];
        if let Ok(entries) = std::fs::read_dir(self.images_dir()) {
            for e in entries.flatten() {
                let meta = e.path().join(IMPORTED_META);
                let Ok(text) = std::fs::read_to_string(&meta) else { continue };
                let Ok(mut image) = serde_json::from_str::<Image>(&text) else { continue };
                image.used_by = used_by(&image.name);
                out.push(image);
            }
        }
        // A tenant sees the images for every tenant and its own, and only its own sandboxes among their users.
        if let Some(t) = super::tenancy::tenant_now() {
            out.retain(|i| self.may_use(i.tenant.as_deref(), true));
            for i in &mut out {
                i.used_by
                    .retain(|id| self.store.record(id).ok().flatten().is_some_and(|r| r.tenant.as_ref() == Some(&t)));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// An image the caller's tenant may use, by name.
    pub fn image(&self, name: &str) -> Result<Image, EngineError> {
        self.images()?.into_iter().find(|i| i.name == name).ok_or_else(|| EngineError::NoImage(name.to_string()))
    }

    /// Start importing an image; its progress, then its result, arrive on the returned channel. What can be
    /// checked before the import starts (the name, the source) is an error here instead.
    pub async fn import_image(self: &Arc<Self>, req: ImportImage) -> Result<mpsc::Receiver<ImportFrame>, EngineError> {
        berth_runtime::spec::check_name(&req.name).map_err(|e| EngineError::invalid(e.to_string()))?;
        if req.name == "host" || self.images_dir().join(&req.name).exists() {
            return Err(EngineError::Conflict(format!("an image named {:?} already exists", req.name)));
        }
        if let Some(t) = &req.tenant
            && self.store.tenant(t)?.is_none()
        {
            return Err(EngineError::NoTenant(t.clone()));
        }
        let source = PathBuf::from(&req.source);
        if !source.is_absolute() {
            return Err(EngineError::invalid("source must be an absolute path on the daemon's host"));
        }
        let kind = berth_image::detect(&source).map_err(|e| EngineError::invalid(berth_runtime::error_chain(&e)))?;
        let (tx, rx) = mpsc::channel(64);
        let engine = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let frame = match engine.import_blocking(&req, &source, kind, &tx) {
                Ok(image) => ImportFrame::Done { image },
                Err(e) => ImportFrame::Error {
                    error: berth_api::ApiError { code: e.code(), message: berth_runtime::error_chain(&e) },
                },
            };
            let _ = tx.blocking_send(frame);
        });
        Ok(rx)
    }

    fn import_blocking(
        &self,
        req: &ImportImage,
        source: &Path,
        kind: berth_image::SourceKind,
        tx: &mpsc::Sender<ImportFrame>,
    ) -> Result<Image, EngineError> {
        let suffix = berth_runtime::new_id().map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?;
        let tmp = self.images_dir().join(format!(".import-{}-{suffix}", req.name));
        let rootfs = tmp.join(IMPORTED_ROOTFS);
        let io = |e: std::io::Error| EngineError::Storage(format!("cannot prepare {}: {e}", tmp.display()));
        std::fs::create_dir_all(&rootfs).map_err(io)?;
        let base = berth_runtime::ids::STORAGE_BASE;
        std::os::unix::fs::lchown(&rootfs, Some(base), Some(base)).map_err(io)?;
        let last = std::sync::Mutex::new(std::time::Instant::now());
        let progress = |p: berth_image::Progress| {
            // At most a few frames a second: a bar needs no more.
            if let Ok(mut t) = last.lock()
                && t.elapsed() >= std::time::Duration::from_millis(200)
            {
                *t = std::time::Instant::now();
                let _ = tx.try_send(ImportFrame::Progress {
                    layer: p.layer as u32,
                    layers: p.layers as u32,
                    bytes_done: p.bytes_done,
                    bytes_total: p.bytes_total,
                });
            }
        };
        let opts =
            berth_image::Options { id_shift: base, progress: Some(&progress), ..berth_image::Options::default() };
        let report = match berth_image::import(source, &rootfs, &opts) {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(EngineError::InvalidRequest { message: berth_runtime::error_chain(&e) });
            }
        };
        let image = Image {
            name: req.name.clone(),
            kind: match kind {
                berth_image::SourceKind::Directory => "directory",
                berth_image::SourceKind::Tarball => "tarball",
                berth_image::SourceKind::OciLayout => "oci",
                berth_image::SourceKind::DockerSave => "docker",
            }
            .into(),
            created_at_ms: now_ms(),
            layers: report.layers as u32,
            files: report.files,
            bytes: report.bytes,
            rejected: report.rejected.into_iter().map(|r| RejectedEntry { path: r.path, reason: r.reason }).collect(),
            env: report.config.env,
            cmd: report.config.entrypoint.into_iter().chain(report.config.cmd).collect(),
            workdir: report.config.workdir,
            used_by: vec![],
            tenant: req.tenant.clone(),
        };
        let written = serde_json::to_vec_pretty(&image)
            .map_err(std::io::Error::other)
            .and_then(|j| std::fs::write(tmp.join(IMPORTED_META), j))
            .and_then(|()| std::fs::rename(&tmp, self.images_dir().join(&req.name)));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(EngineError::Storage(format!("cannot keep the image {}: {e}", req.name)));
        }
        Ok(image)
    }

    pub async fn remove_image(&self, name: &str) -> Result<Image, EngineError> {
        if name == "host" {
            return Err(EngineError::Conflict("the host image is built in and cannot be removed".into()));
        }
        let image =
            self.images()?.into_iter().find(|i| i.name == name).ok_or_else(|| EngineError::NoImage(name.into()))?;
        if !image.used_by.is_empty() {
            return Err(EngineError::Conflict(format!(
                "image {name:?} is used by {}: remove those sandboxes first",
                image.used_by.join(", ")
            )));
        }
        let dir = self.images_dir().join(name);
        let gone = self.images_dir().join(format!(".removing-{name}-{}", now_ms()));
        std::fs::rename(&dir, &gone)
            .map_err(|e| EngineError::Storage(format!("cannot remove {}: {e}", dir.display())))?;
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(gone))
            .await
            .map_err(|_| EngineError::Storage("removing the image panicked".into()))?
            .map_err(|e| EngineError::Storage(format!("cannot remove the image's files: {e}")))?;
        Ok(image)
    }

    /// The environment an image asks for (`KEY=VALUE` lines from its config), as defaults for a sandbox.
    pub(crate) fn image_env(&self, name: &str) -> Vec<(String, String)> {
        if name == "host" {
            return vec![];
        }
        self.image(name)
            .map(|i| {
                i.env.iter().filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
            })
            .unwrap_or_default()
    }
}
