//! Secrets: kept sealed in the vault (the key in a file of its own, apart from the database), given to the
//! sandboxes that declare them — as an environment variable, or only as a placeholder the proxy swaps for the
//! value on the way to one host — and redacted from what berth shows of a sandbox: exec output, exec logs,
//! the journal.

use std::path::PathBuf;

use berth_api::SecretInfo;
use berth_secrets::{Redactor, Vault};

use super::Engine;
use crate::EngineError;

/// A sandbox's secrets, resolved at start.
#[derive(Default)]
pub(super) struct Resolved {
    /// Environment variables (values, or placeholders for injected secrets).
    pub env: Vec<(String, String)>,
    /// What the proxy swaps in.
    pub injections: Vec<berth_egress::Injection>,
    /// Every value, for redaction.
    pub redactor: Option<Redactor>,
}

/// Where the vault's key lives: `BERTH_SECRETS_KEY` if set (a path outside the data root, as it should be in
/// production), else `<root>/keys/secrets.key`.
pub(super) fn key_path(root: &std::path::Path) -> PathBuf {
    std::env::var_os("BERTH_SECRETS_KEY").map(PathBuf::from).unwrap_or_else(|| root.join("keys").join("secrets.key"))
}

fn secret_err(e: berth_secrets::SecretError) -> EngineError {
    use berth_secrets::SecretError as S;
    match e {
        e @ (S::BadName { .. } | S::TooLarge { .. } | S::NulByte { .. }) => EngineError::invalid(e.to_string()),
        e => EngineError::Storage(berth_runtime::error_chain(&e)),
    }
}

/// How a declared secret reaches where it is used.
#[derive(Clone)]
enum Delivery {
    /// An environment variable with the value.
    Env,
    /// A placeholder in the sandbox; the proxy puts the value into requests to `rule`'s hosts: inside
    /// intercepted TLS (`https`), or in plain HTTP only when asked for with `NAME@http://HOST`.
    Proxy { rule: berth_egress::Rule, https: bool },
}

/// `NAME`, `NAME@HOST` (HTTPS) or `NAME@http://HOST` (plain HTTP).
fn parse_decl(decl: &str) -> Result<(String, Delivery), EngineError> {
    let (name, host) = match decl.split_once('@') {
        Some((n, h)) => (n, Some(h)),
        None => (decl, None),
    };
    berth_secrets::check_name(name).map_err(secret_err)?;
    let reserved = name.starts_with("BERTH_") || name.to_ascii_uppercase().ends_with("_PROXY") || name == "PATH";
    if reserved {
        return Err(EngineError::invalid(format!(
            "a secret cannot be named {name}: berth sets that variable itself (BERTH_*, *_PROXY, PATH)"
        )));
    }
    let delivery = match host {
        None => Delivery::Env,
        Some(h) => {
            let (https, h) = match h.strip_prefix("http://") {
                Some(plain) => (false, plain),
                None => (true, h.strip_prefix("https://").unwrap_or(h)),
            };
            let rule =
                h.parse::<berth_egress::Rule>().map_err(|e| EngineError::invalid(format!("secret {decl:?}: {e}")))?;
            Delivery::Proxy { rule, https }
        }
    };
    Ok((name.to_string(), delivery))
}

impl Engine {
    /// The operators' vault: the secrets of sandboxes of no tenant.
    pub fn vault(&self) -> Result<Vault, EngineError> {
        Vault::open(&self.root, &key_path(&self.root)).map_err(secret_err)
    }

    /// The vault of `tenant`'s sandboxes (of no tenant's: the operators'). Each tenant's is a directory of its
    /// own, sealed with the same key, so a name means one secret within one tenant only.
    pub fn vault_of(&self, tenant: Option<&str>) -> Result<Vault, EngineError> {
        let Some(t) = tenant else { return self.vault() };
        berth_api::check_tenant_name(t).map_err(EngineError::invalid)?;
        if self.store.tenant(t)?.is_none() {
            return Err(EngineError::NoTenant(t.to_string()));
        }
        let dir = self.tenant_vault_dir(t);
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::Storage(format!("make {}: {e}", dir.display())))?;
        Vault::open(&dir, &key_path(&self.root)).map_err(secret_err)
    }

    /// Remove tenant `t`'s vault, with every secret in it (none made yet is fine).
    pub(super) fn remove_vault_of(&self, t: &str) -> Result<(), EngineError> {
        let dir = self.tenant_vault_dir(t);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(EngineError::Storage(format!("remove {}: {e}", dir.display())))
            }
            _ => Ok(()),
        }
    }

    fn tenant_vault_dir(&self, t: &str) -> std::path::PathBuf {
        self.root.join("tenants").join(t)
    }

    /// Set a secret for the sandboxes of `tenant` (none: of no tenant).
    pub fn set_secret(&self, name: &str, value: &[u8], tenant: Option<&str>) -> Result<SecretInfo, EngineError> {
        parse_decl(name)?;
        let vault = self.vault_of(tenant)?;
        vault.set(name, value).map_err(secret_err)?;
        self.secrets(tenant)?
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| EngineError::Storage("the secret vanished".into()))
    }

    /// The secrets of `tenant`'s sandboxes (names and sizes; never values).
    pub fn secrets(&self, tenant: Option<&str>) -> Result<Vec<SecretInfo>, EngineError> {
        Ok(self
            .vault_of(tenant)?
            .list()
            .map_err(secret_err)?
            .into_iter()
            .map(|s| SecretInfo {
                name: s.name,
                created_at_ms: s.created_at_ms,
                updated_at_ms: s.updated_at_ms,
                bytes: s.bytes,
            })
            .collect())
    }

    pub fn remove_secret(&self, name: &str, tenant: Option<&str>) -> Result<(), EngineError> {
        berth_secrets::check_name(name).map_err(secret_err)?;
        match self.vault_of(tenant)?.remove(name).map_err(secret_err)? {
            true => Ok(()),
            false => Err(EngineError::NoSecret(name.to_string())),
        }
    }

    /// Check a create request's secrets: well formed, and set in its tenant's vault.
    pub(super) fn check_secrets(&self, decls: &[String], tenant: Option<&str>) -> Result<(), EngineError> {
        if decls.is_empty() {
            return Ok(());
        }
        let vault = self.vault_of(tenant)?;
        for d in decls {
            let (name, _) = parse_decl(d)?;
            if vault.get(&name).map_err(secret_err)?.is_none() {
                return Err(EngineError::NoSecret(name));
            }
        }
        Ok(())
    }

    /// The secrets a sandbox declared, from its kept spec.
    pub(super) fn spec_secrets(&self, id: &str) -> Vec<String> {
        self.store
            .spec(id)
            .ok()
            .flatten()
            .and_then(|s| serde_json::from_value(s["secrets"].clone()).ok())
            .unwrap_or_default()
    }

    /// A sandbox's secrets for one run: values from the vault, placeholders for injected ones (those the
    /// running sandbox already holds in `env`, when it is adopted; fresh ones otherwise).
    pub(super) fn resolve_secrets(
        &self,
        decls: &[String],
        env: Option<&std::collections::BTreeMap<String, String>>,
        tenant: Option<&str>,
    ) -> Result<Resolved, EngineError> {
        let mut out = Resolved::default();
        if decls.is_empty() {
            return Ok(out);
        }
        let vault = self.vault_of(tenant)?;
        let mut values = Vec::new();
        for d in decls {
            let (name, delivery) = parse_decl(d)?;
            // A running sandbox already holds its plain secrets: those are what to redact, whatever the
            // vault says now (a value changed or removed since it started).
            if let (Delivery::Env, Some(held)) = (&delivery, env.and_then(|e| e.get(&name))) {
                values.push((name.clone(), held.as_bytes().to_vec()));
                out.env.push((name, held.clone()));
                continue;
            }
            let value = vault.get(&name).map_err(secret_err)?.ok_or_else(|| EngineError::NoSecret(name.clone()))?;
            let text = String::from_utf8(value.to_vec()).map_err(|_| {
                EngineError::invalid(format!(
                    "secret {name} is not UTF-8 text, so it cannot be an environment variable"
                ))
            })?;
            values.push((name.clone(), value.to_vec()));
            match delivery {
                Delivery::Env => out.env.push((name, text)),
                Delivery::Proxy { .. } if text.chars().any(char::is_control) => {
                    return Err(EngineError::invalid(format!(
                        "secret {name} holds a line break or another control character, which cannot go into a request \
                         header: set it again without one"
                    )));
                }
                Delivery::Proxy { rule, https } => {
                    let placeholder = match env.and_then(|e| e.get(&name)) {
                        Some(p) => p.clone(),
                        None => format!(
                            "berth-secret-{name}-{}",
                            berth_runtime::new_id()
                                .map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?
                        ),
                    };
                    out.env.push((name, placeholder.clone()));
                    out.injections.push(berth_egress::Injection {
                        host_rule: rule,
                        placeholder,
                        value: text,
                        header: None,
                        intercept_tls: https,
                    });
                }
            }
        }
        out.redactor = Some(Redactor::new(&values));
        Ok(out)
    }
}
