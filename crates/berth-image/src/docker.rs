//! `docker save` archives in the classic format: `manifest.json` lists, per image, the config file and the
//! layer tars by their path in the archive. Layers carry no digest there, so each is checked against the
//! config's `rootfs.diff_ids` (the sha256 of the uncompressed tar) instead. Newer docker save archives are
//! also OCI layouts; those go through [`crate::oci`], whose digests cover the stored blobs.

use serde::Deserialize;

use crate::bundle::{Bundle, Digest, check, clean};
use crate::error::ImportError;
use crate::oci::{ConfigFile, LayerRef, Plan, Platform, json};

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

/// Picks the image for `platform` (when the archive holds several) and lists its layers.
pub(crate) fn plan(bundle: &Bundle, platform: &Platform) -> Result<Plan, ImportError> {
    let entries: Vec<Entry> = json("manifest.json", &bundle.read_small("manifest.json")?)?;
    if entries.is_empty() {
        return Err(ImportError::invalid("manifest.json", "it lists no image"));
    }
    let mut chosen = None;
    let mut seen = Vec::new();
    for entry in &entries {
        let name = member(&entry.config)?;
        let data = bundle.read_small(&name)?;
        verify_config(&name, &data)?;
        let config = ConfigFile::parse(&name, &data)?;
        let matches = platform.matches(&config.os, &config.architecture, config.variant.as_deref());
        seen.push(format!("{}/{}", config.os, config.architecture));
        if entries.len() == 1 || matches {
            chosen = Some((entry, config));
            break;
        }
    }
    let Some((entry, config)) = chosen else {
        return Err(ImportError::NoPlatform { platform: platform.to_string(), available: seen.join(", ") });
    };
    let diff_ids: Vec<Digest> = match &config.rootfs {
        Some(rootfs) if rootfs.diff_ids.len() == entry.layers.len() => {
            rootfs.diff_ids.iter().map(|d| Digest::parse(d)).collect::<Result<_, _>>()?
        }
        Some(rootfs) if !rootfs.diff_ids.is_empty() => {
            return Err(ImportError::invalid(
                "manifest.json",
                format!("it lists {} layers but the image config lists {}", entry.layers.len(), rootfs.diff_ids.len()),
            ));
        }
        _ => Vec::new(),
    };
    let mut layers = Vec::new();
    for (i, layer) in entry.layers.iter().enumerate() {
        layers.push(LayerRef { name: member(layer)?, digest: None, diff_id: diff_ids.get(i).cloned() });
    }
    Ok(Plan { layers, config: config.image_config() })
}

/// A path from `manifest.json`, which must stay inside the archive.
fn member(path: &str) -> Result<String, ImportError> {
    clean(path).ok_or_else(|| ImportError::invalid("manifest.json", format!("it names {path:?}, outside the archive")))
}

/// Docker names a config file after its digest (`<hex>.json`, or `blobs/sha256/<hex>`), so it can be checked.
fn verify_config(name: &str, data: &[u8]) -> Result<(), ImportError> {
    let file = name.rsplit('/').next().unwrap_or(name);
    let hex = file.strip_suffix(".json").unwrap_or(file);
    match Digest::parse(&format!("sha256:{hex}")) {
        Ok(digest) => check(name, data, &digest, None),
        Err(_) => Ok(()),
    }
}
