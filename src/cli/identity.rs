//! `stq serve`'s flags of docs/api.md section 16: the API listener's certificate
//! and key, and the identity provider whose JSON Web Tokens it accepts.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::jwt::{JwtSettings, KeySource};
use crate::tls::Certificates;

#[derive(Debug, Clone, Args)]
pub struct IdentityArgs {
    /// PEM certificate chain of the API listener, which then speaks HTTPS only (TLS
    /// 1.2 and 1.3, HTTP/2 and HTTP/1.1); read again at every reload. Needs
    /// --tls-key.
    #[arg(long, env = "STQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert; read again at every
    /// reload.
    #[arg(long, env = "STQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// The identity provider's JSON Web Key Set: a file (read again at every
    /// reload) or an `https://` URL (fetched at start-up, every 10 minutes, and for
    /// an unknown key id at most once a minute). Bearer tokens shaped as JSON Web
    /// Tokens are then verified against it. Needs --jwt-issuer.
    #[arg(long, env = "STQ_JWT_JWKS", value_parser = parse_key_source, requires = "jwt_issuer")]
    pub jwt_jwks: Option<KeySource>,

    /// The `iss` every JSON Web Token must carry.
    #[arg(long, env = "STQ_JWT_ISSUER", requires = "jwt_jwks")]
    pub jwt_issuer: Option<String>,

    /// An audience every JSON Web Token's `aud` must contain [default: `aud` not
    /// checked].
    #[arg(long, env = "STQ_JWT_AUDIENCE", requires = "jwt_jwks")]
    pub jwt_audience: Option<String>,

    /// The claim holding a JSON Web Token's stations: a list of station ids, or
    /// `"*"`.
    #[arg(long, env = "STQ_JWT_STATIONS_CLAIM", default_value = "stq_stations")]
    pub jwt_stations_claim: String,
}

impl IdentityArgs {
    /// The pair of --tls-cert and --tls-key, read now; `None` without them.
    pub fn certificates(&self) -> anyhow::Result<Option<Arc<Certificates>>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(certificate), Some(key)) => Ok(Some(Certificates::load(certificate, key)?)),
            _ => Ok(None),
        }
    }

    /// What JSON Web Tokens are verified with; `None` without --jwt-jwks.
    pub fn jwt(&self) -> Option<JwtSettings> {
        Some(JwtSettings {
            source: self.jwt_jwks.clone()?,
            issuer: self.jwt_issuer.clone()?,
            audience: self.jwt_audience.clone(),
            stations_claim: self.jwt_stations_claim.clone(),
        })
    }
}

fn parse_key_source(text: &str) -> Result<KeySource, String> {
    KeySource::parse(text)
}
