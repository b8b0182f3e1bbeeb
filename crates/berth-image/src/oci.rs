//! OCI image layouts: from `index.json` through (possibly nested) indexes to the manifest for a platform, then
//! its config and layers. Every blob read is checked against its descriptor's digest and size.

use std::collections::HashMap;

use serde::Deserialize;

use crate::ImageConfig;
use crate::bundle::{Bundle, Digest, check};
use crate::error::ImportError;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// How deep indexes may nest before the layout is considered hostile.
const MAX_DEPTH: usize = 8;

#[derive(Debug, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<PlatformJson>,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct PlatformJson {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    variant: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// The parts of an image config berth uses (the OCI and docker configs share these names).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    config: Option<RunConfig>,
    #[serde(default)]
    pub(crate) architecture: String,
    #[serde(default)]
    pub(crate) os: String,
    #[serde(default)]
    pub(crate) variant: Option<String>,
    #[serde(default)]
    pub(crate) rootfs: Option<RootFs>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig {
    env: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RootFs {
    #[serde(default)]
    pub(crate) diff_ids: Vec<String>,
}

impl ConfigFile {
    pub(crate) fn parse(what: &str, data: &[u8]) -> Result<ConfigFile, ImportError> {
        json(what, data)
    }

    pub(crate) fn image_config(&self) -> ImageConfig {
        let c = self.config.as_ref();
        let nonempty = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
        ImageConfig {
            env: c.and_then(|c| c.env.clone()).unwrap_or_default(),
            cmd: c.and_then(|c| c.cmd.clone()).unwrap_or_default(),
            entrypoint: c.and_then(|c| c.entrypoint.clone()).unwrap_or_default(),
            workdir: nonempty(c.and_then(|c| c.working_dir.as_ref())),
            user: nonempty(c.and_then(|c| c.user.as_ref())),
        }
    }
}

/// A platform to pick: `os/architecture[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Platform {
    os: String,
    arch: String,
    variant: Option<String>,
}

impl Platform {
    pub(crate) fn parse(text: &str) -> Result<Platform, ImportError> {
        let bad = || ImportError::BadPlatform { platform: text.to_string() };
        let parts: Vec<&str> = text.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        match parts.as_slice() {
            [os, arch] => Ok(Platform { os: os.to_string(), arch: normal_arch(arch), variant: None }),
            [os, arch, variant] => {
                Ok(Platform { os: os.to_string(), arch: normal_arch(arch), variant: Some(variant.to_string()) })
            }
            _ => Err(bad()),
        }
    }

    /// Whether an image for `os/arch/variant` runs here; a variant is compared only when both name one.
    pub(crate) fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        let variant_ok = match (self.variant.as_deref(), variant) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        self.os == os && self.arch == normal_arch(arch) && variant_ok
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

fn normal_arch(arch: &str) -> String {
    match arch {
        "x86_64" | "x86-64" => "amd64".into(),
        "aarch64" => "arm64".into(),
        other => other.to_string(),
    }
}

/// A layer to apply: where it is in the bundle and what to check it against.
#[derive(Debug)]
pub(crate) struct LayerRef {
    pub(crate) name: String,
    /// Digest and size of the stored (possibly compressed) blob.
    pub(crate) digest: Option<(Digest, u64)>,
    /// Digest of the uncompressed tar (docker's `diff_ids`).
    pub(crate) diff_id: Option<Digest>,
}

#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) layers: Vec<LayerRef>,
    pub(crate) config: ImageConfig,
}

/// Picks the manifest for `platform` and reads its config and layer list.
pub(crate) fn plan(bundle: &Bundle, platform: &Platform) -> Result<Plan, ImportError> {
    let index: Index = json("index.json", &bundle.read_small("index.json")?)?;
    let mut seen = Vec::new();
    let Some((_, manifest)) = select(bundle, &index, platform, 0, &mut seen)? else {
        seen.dedup();
        let available = if seen.is_empty() { "no platforms".to_string() } else { seen.join(", ") };
        return Err(ImportError::NoPlatform { platform: platform.to_string(), available });
    };
    let config_data = read_blob(bundle, &manifest.config)?;
    let config = ConfigFile::parse("the image config", &config_data)?;
    let mut layers = Vec::new();
    for layer in &manifest.layers {
        if !is_tar_layer(&layer.media_type) {
            return Err(ImportError::UnsupportedMediaType {
                name: layer.digest.clone(),
                media_type: layer.media_type.clone(),
            });
        }
        let digest = Digest::parse(&layer.digest)?;
        layers.push(LayerRef { name: digest.blob_path(), digest: Some((digest, layer.size)), diff_id: None });
    }
    Ok(Plan { layers, config: config.image_config() })
}

/// The best manifest under `index` for `platform`: one whose platform matches beats one that names none.
/// Indexes may nest; descriptors for other platforms and build attestations are passed over.
fn select(
    bundle: &Bundle,
    index: &Index,
    platform: &Platform,
    depth: usize,
    seen: &mut Vec<String>,
) -> Result<Option<(u8, Manifest)>, ImportError> {
    if depth > MAX_DEPTH {
        return Err(ImportError::invalid("the image index", format!("indexes nest more than {MAX_DEPTH} deep")));
    }
    let mut best: Option<(u8, Manifest)> = None;
    for desc in &index.manifests {
        if desc.annotations.get("vnd.docker.reference.type").is_some_and(|t| t == "attestation-manifest") {
            continue;
        }
        let score = match &desc.platform {
            Some(p) => {
                let variant = p.variant.as_deref().map(|v| format!("/{v}")).unwrap_or_default();
                seen.push(format!("{}/{}{variant}", p.os, p.architecture));
                if !platform.matches(&p.os, &p.architecture, p.variant.as_deref()) {
                    continue;
                }
                2
            }
            None => 1,
        };
        let found = match desc.media_type.as_str() {
            OCI_INDEX | DOCKER_LIST => nested(bundle, desc, platform, depth, seen)?,
            OCI_MANIFEST | DOCKER_MANIFEST => Some((score, json("a manifest", &read_blob(bundle, desc)?)?)),
            "" => {
                // Older layouts leave the media type out; the document says what it is.
                let data = read_blob(bundle, desc)?;
                let value: serde_json::Value = json("a manifest", &data)?;
                if value.get("manifests").is_some() {
                    nested(bundle, desc, platform, depth, seen)?
                } else {
                    Some((score, json("a manifest", &data)?))
                }
            }
            _ => None,
        };
        if let Some((s, m)) = found
            && best.as_ref().is_none_or(|(b, _)| s > *b)
        {
            best = Some((s, m));
        }
    }
    Ok(best)
}

fn nested(
    bundle: &Bundle,
    desc: &Descriptor,
    platform: &Platform,
    depth: usize,
    seen: &mut Vec<String>,
) -> Result<Option<(u8, Manifest)>, ImportError> {
    let index: Index = json("an image index", &read_blob(bundle, desc)?)?;
    select(bundle, &index, platform, depth + 1, seen)
}

/// Reads a JSON blob and checks it against its descriptor.
fn read_blob(bundle: &Bundle, desc: &Descriptor) -> Result<Vec<u8>, ImportError> {
    let digest = Digest::parse(&desc.digest)?;
    let name = digest.blob_path();
    let data = bundle.read_small(&name)?;
    check(&name, data.as_slice(), &digest, Some(desc.size))?;
    Ok(data)
}

fn is_tar_layer(media_type: &str) -> bool {
    matches!(
        media_type,
        // Compression is told by magic bytes; an unlabelled layer is still a tar.
        "" | "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.oci.image.layer.v1.tar+zstd"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
            | "application/vnd.docker.image.rootfs.diff.tar"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    )
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(what: &str, data: &[u8]) -> Result<T, ImportError> {
    serde_json::from_slice(data).map_err(|source| ImportError::Json { what: what.to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms() -> Result<(), ImportError> {
        let p = Platform::parse("linux/arm64/v8")?;
        assert!(p.matches("linux", "aarch64", None));
        assert!(p.matches("linux", "arm64", Some("v8")));
        assert!(!p.matches("linux", "arm64", Some("v7")));
        assert!(!Platform::parse("linux/amd64")?.matches("linux", "arm64", None));
        assert!(Platform::parse("linux").is_err());
        assert!(Platform::parse("linux//x").is_err());
        Ok(())
    }
}
