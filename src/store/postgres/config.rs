//! A `postgres://` URL, parsed once: where the database is (the client's part, libpq's
//! meanings), how to reach it (TLS), and llmsession's own settings (the pool, the lease, the
//! bounds), with the URL as it may be shown (no password).

use super::error::error_text;
use crate::error::{Error, Result};
use crate::store::url::percent_decode;
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::config::{Host, SslMode as ClientSslMode};

/// libpq's `sslmode`, as llmsession implements it (`docs/storage-postgres.md`, "TLS").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, without checking its certificate (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is not checked, unless `sslrootcert` names a CA
    /// file (then as `VerifyCa`, as libpq does).
    Require,
    /// TLS, and the server's certificate chain must lead to a CA in `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host the URL connects to.
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Option<SslMode> {
        Some(match v {
            "disable" => SslMode::Disable,
            "prefer" | "allow" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The name in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// How a connection is secured.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// `sslmode` (default `prefer`).
    pub mode: SslMode,
    /// `sslrootcert`: the CA certificates (PEM) the server's chain must lead to.
    pub root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: a client certificate (PEM) and its private key.
    pub client_cert: Option<PathBuf>,
    /// See `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// llmsession's own settings of a database: the pool, the lease and the bounds of every call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// `pool_size`: the most connections this process opens to the database for its sessions.
    pub pool_size: usize,
    /// `pool_timeout`: the longest a call waits for a free connection.
    pub pool_timeout: Duration,
    /// `connect_timeout`: the longest one connection attempt to one host takes, TCP, TLS and
    /// authentication together.
    pub connect_timeout: Duration,
    /// `query_timeout`: the longest one statement (or one short transaction) takes.
    pub query_timeout: Duration,
    /// `lease_time`: how long a writer's lease lasts without renewal.
    pub lease_time: Duration,
    /// `lease_timeout`: the longest taking or giving back a lease takes.
    pub lease_timeout: Duration,
    /// `fast_takeover`: the writer keeps one extra connection holding an advisory lock, so that
    /// when its process dies another worker takes its sessions over at once instead of after
    /// `lease_time`. Off by default with `pooler=transaction` (the lock cannot be held there).
    pub fast_takeover: bool,
    /// Statements are prepared once per connection and kept (off with `pooler=transaction`,
    /// where a prepared statement may live on another server connection than the next call's).
    pub prepared: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            pool_size: 10,
            pool_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            query_timeout: Duration::from_secs(30),
            lease_time: Duration::from_secs(15),
            lease_timeout: Duration::from_secs(5),
            fast_takeover: true,
            prepared: true,
        }
    }
}

/// The most connections one pool may have.
const MAX_POOL_SIZE: usize = 1000;

/// A parsed `postgres://` or `postgresql://` URL: where the database is, without the password
/// in anything printed.
#[derive(Clone)]
pub struct PgUrl {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: TlsSettings,
    pub(super) settings: Settings,
    /// The URL without its password and without `session`.
    pub(super) shown: String,
    /// The `session` query parameter, if any.
    session: Option<String>,
    /// What makes two URLs share a pool: the URL as given without `session` (password
    /// included: never shown).
    pub(super) pool_key: String,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgUrl").field("url", &self.shown).field("session", &self.session).finish()
    }
}

/// The parameters llmsession reads itself (the rest go to the client).
const OWN: &[&str] = &[
    "session",
    "pool_size",
    "pool_timeout",
    "connect_timeout",
    "query_timeout",
    "lease_time",
    "lease_timeout",
    "fast_takeover",
    "pooler",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
];

/// libpq parameters the client does not implement, named so the refusal is clear.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("sslpassword", "encrypted client keys are not supported: give sslkey an unencrypted PEM key file"),
    ("sslcrl", "certificate revocation lists are not supported"),
    ("sslcrldir", "certificate revocation lists are not supported"),
    ("sslsni", "SNI is always sent for host names"),
    ("gssencmode", "GSSAPI is not supported"),
    ("passfile", "password files are not read: put the password in the URL or use a client certificate"),
];

impl PgUrl {
    /// Parses a libpq-style URL: `postgres[ql]://[user[:password]@][host][:port][,host:port...][/dbname][?k=v&...]`.
    /// A host that starts with `/` (percent-encoded as `%2F`, or given as `?host=/dir`) is the
    /// directory of the server's unix socket. The query takes libpq's parameters that the client
    /// knows (`host`, `port`, `user`, `password`, `dbname`, `options`, `application_name`,
    /// `connect_timeout`, `keepalives*`, `tcp_user_timeout`, `target_session_attrs`, `sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey`, ...) plus llmsession's own (`session`, `pool_size`,
    /// `pool_timeout`, `query_timeout`, `lease_time`, `lease_timeout`, `fast_takeover`).
    pub fn parse(url: &str) -> Result<PgUrl> {
        let bad = |why: String| Error::invalid("url", format!("{why} (expected postgres://user:password@host:port/dbname?session=ID)"));
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("not a postgres:// or postgresql:// URL".into()));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        check_escapes(base, "the user, password, host or database part")?;
        let mut session = None;
        let mut settings = Settings::default();
        let mut tls = TlsSettings { mode: SslMode::Prefer, root_cert: None, client_cert: None, client_key: None };
        let mut kept = Vec::new();
        let mut shown_own = Vec::new();
        let mut takeover_given = None;
        let mut pooled = false;
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if let Some((_, why)) = UNSUPPORTED.iter().find(|(name, _)| *name == k) {
                return Err(Error::invalid("url", format!("the URL parameter {k} is not supported: {why}")));
            }
            if !OWN.contains(&k) {
                check_escapes(v, &format!("the value of {k}"))?;
                kept.push(pair);
                continue;
            }
            let value = percent_decode(v).ok_or_else(|| bad(format!("the {k} parameter is not valid percent-encoded UTF-8")))?;
            let param = |why: &str| Error::invalid("url", format!("the URL parameter {k}={value}: {why}")).with("parameter", k.to_string());
            match k {
                "session" => {
                    if value.is_empty() {
                        return Err(bad("the session parameter is empty".into()));
                    }
                    session = Some(value);
                    continue;
                }
                "pool_size" => {
                    settings.pool_size = match value.parse::<usize>() {
                        Ok(n) if (1..=MAX_POOL_SIZE).contains(&n) => n,
                        _ => return Err(param(&format!("expected a number of connections from 1 to {MAX_POOL_SIZE}"))),
                    }
                }
                "pool_timeout" => settings.pool_timeout = seconds(&value).ok_or_else(|| param(SECONDS))?,
                "connect_timeout" => settings.connect_timeout = seconds(&value).ok_or_else(|| param(SECONDS))?,
                "query_timeout" => settings.query_timeout = seconds(&value).ok_or_else(|| param(SECONDS))?,
                "lease_time" => settings.lease_time = seconds(&value).filter(|d| *d >= Duration::from_secs(1)).ok_or_else(|| {
                    param("expected the lease's length in seconds, at least 1 and at most 86400 (one day; it is renewed every third of it)")
                })?,
                "lease_timeout" => settings.lease_timeout = seconds(&value).ok_or_else(|| param(SECONDS))?,
                "fast_takeover" => {
                    takeover_given = Some(match value.as_str() {
                        "on" | "true" | "1" => true,
                        "off" | "false" | "0" => false,
                        _ => return Err(param("expected on or off")),
                    })
                }
                "pooler" => {
                    pooled = match value.as_str() {
                        "transaction" => true,
                        "none" | "session" => false,
                        _ => return Err(param("expected transaction (PgBouncer, RDS Proxy, Supavisor... in transaction mode) or none")),
                    }
                }
                "sslmode" => {
                    tls.mode = SslMode::parse(&value).ok_or_else(|| param("expected disable, prefer, require, verify-ca or verify-full"))?
                }
                "sslrootcert" => tls.root_cert = Some(PathBuf::from(&value)),
                "sslcert" => tls.client_cert = Some(PathBuf::from(&value)),
                "sslkey" => tls.client_key = Some(PathBuf::from(&value)),
                _ => unreachable!("every parameter of OWN is read"),
            }
            shown_own.push(pair);
        }
        // Through a transaction-mode pooler: no statement outlives its round trip, and no
        // session-level lock can be held (the liveness lock of fast_takeover).
        settings.prepared = !pooled;
        settings.fast_takeover = takeover_given.unwrap_or(!pooled);
        if tls.mode == SslMode::Require && tls.root_cert.is_some() {
            // libpq: a root certificate given with require verifies the chain.
            tls.mode = SslMode::VerifyCa;
        }
        if matches!(tls.mode, SslMode::VerifyCa | SslMode::VerifyFull) && tls.root_cert.is_none() {
            return Err(Error::invalid(
                "url",
                format!(
                    "sslmode={} needs sslrootcert=PATH: the CA certificate (PEM) the server's certificate must be signed by",
                    tls.mode.as_str()
                ),
            ));
        }
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            return Err(Error::invalid("url", "a client certificate needs both sslcert=PATH and sslkey=PATH"));
        }
        let client_url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        let mut config: tokio_postgres::Config =
            client_url.parse().map_err(|e: tokio_postgres::Error| bad(format!("cannot parse the URL: {}", error_text(&e))))?;
        if config.get_hosts().is_empty() {
            return Err(bad("the URL names no host (a host name, an address, or ?host=/path/to/socket/directory)".into()));
        }
        if config.get_user().is_none() {
            return Err(bad("the URL names no user".into()));
        }
        let ports = config.get_ports().len();
        if ports > 1 && ports != config.get_hosts().len() {
            return Err(bad(format!(
                "the URL names {} hosts but {ports} ports (one port for all, or one per host)",
                config.get_hosts().len()
            )));
        }
        config.ssl_mode(match tls.mode {
            SslMode::Disable => ClientSslMode::Disable,
            SslMode::Prefer => ClientSslMode::Prefer,
            _ => ClientSslMode::Require,
        });
        config.connect_timeout(settings.connect_timeout);
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        if config.get_application_name().is_none() {
            config.application_name(application_name());
        }
        let mut shown_params: Vec<&str> = kept.iter().filter(|p| !p.starts_with("password=")).copied().collect();
        shown_params.extend(shown_own.iter().copied());
        let shown = shown_url(&config, &shown_params);
        let mut key_params = kept.clone();
        key_params.extend(shown_own.iter().copied());
        let pool_key = format!("{base}?{}", key_params.join("&"));
        Ok(PgUrl { config, tls, settings, shown, session, pool_key })
    }

    /// The `session` query parameter.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The same database without the `session` parameter (to open another session in it).
    pub fn without_session(&self) -> PgUrl {
        PgUrl { session: None, ..self.clone() }
    }

    /// The URL as it may be shown: no password, no `session` parameter.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// llmsession's settings of this URL (defaults where it sets none).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The TLS settings of this URL.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }
}

/// The longest bound or lease a URL may set, in seconds: one day.
const MAX_SECONDS: u32 = 86_400;

const SECONDS: &str =
    "expected a number of seconds more than 0 and at most 86400 (one day; every call has a bound; fractions such as 0.5 are allowed)";

fn seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.parse().ok()?;
    (s.is_finite() && s > 0.0 && s <= f64::from(MAX_SECONDS)).then(|| Duration::from_secs_f64(s))
}

/// Refuses a `%` that does not start a two-hex-digit escape (the client would pass it through
/// as it is, and connect with a password that is not the one written). Names the part, never
/// the text (it may be the password).
fn check_escapes(s: &str, part: &str) -> Result<()> {
    let b = s.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'%' && !(i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()) {
            return Err(Error::invalid(
                "url",
                format!("{part} of the URL holds a '%' that does not start a percent escape (%XX with two hex digits); write a literal % as %25"),
            ));
        }
    }
    Ok(())
}

/// `llmsession pid N on HOST`: what the server shows as the connection's application, and who
/// a lease names as its holder.
pub(super) fn application_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let host = if host.is_empty() { "?".to_string() } else { host };
    let mut name = format!("llmsession pid {} on {host}", std::process::id());
    // The server truncates application names to 63 bytes.
    while name.len() > 63 {
        name.pop();
    }
    name
}

fn shown_url(config: &tokio_postgres::Config, params: &[&str]) -> String {
    let user = config.get_user().unwrap_or_default();
    let mut hosts = Vec::new();
    for (i, h) in config.get_hosts().iter().enumerate() {
        let port = config.get_ports().get(i).or(config.get_ports().first()).copied().unwrap_or(5432);
        hosts.push(match h {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{port}"),
            Host::Tcp(name) => format!("{name}:{port}"),
            Host::Unix(dir) => format!("{}:{port}", dir.display().to_string().replace('/', "%2F")),
        });
    }
    let db = config.get_dbname().unwrap_or(user);
    let query = if params.is_empty() { String::new() } else { format!("?{}", params.join("&")) };
    format!("postgres://{user}@{}/{db}{query}", hosts.join(","))
}

/// The client configuration for host `i` of `config` alone (the pool tries hosts one by one,
/// each within the connect bound, as libpq does).
pub(super) fn single_host(config: &tokio_postgres::Config, i: usize) -> tokio_postgres::Config {
    let mut c = tokio_postgres::Config::new();
    if let Some(u) = config.get_user() {
        c.user(u);
    }
    if let Some(p) = config.get_password() {
        c.password(p);
    }
    if let Some(d) = config.get_dbname() {
        c.dbname(d);
    }
    if let Some(o) = config.get_options() {
        c.options(o);
    }
    if let Some(a) = config.get_application_name() {
        c.application_name(a);
    }
    c.ssl_mode(config.get_ssl_mode());
    match &config.get_hosts()[i] {
        Host::Tcp(h) => c.host(h),
        Host::Unix(p) => c.host_path(p),
    };
    if let Some(a) = config.get_hostaddrs().get(i) {
        c.hostaddr(*a);
    }
    if let Some(p) = config.get_ports().get(i).or(config.get_ports().first()) {
        c.port(*p);
    }
    if let Some(t) = config.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    if let Some(t) = config.get_tcp_user_timeout() {
        c.tcp_user_timeout(*t);
    }
    c.keepalives(config.get_keepalives());
    c.keepalives_idle(config.get_keepalives_idle());
    if let Some(t) = config.get_keepalives_interval() {
        c.keepalives_interval(t);
    }
    if let Some(n) = config.get_keepalives_retries() {
        c.keepalives_retries(n);
    }
    c.target_session_attrs(config.get_target_session_attrs());
    c.channel_binding(config.get_channel_binding());
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn urls_parse_without_showing_the_password() {
        let u = PgUrl::parse("postgres://me:secret@db.example:6543/logs?session=abc%20d&connect_timeout=3").unwrap();
        assert_eq!(u.session(), Some("abc d"));
        assert_eq!(u.shown(), "postgres://me@db.example:6543/logs?connect_timeout=3");
        assert!(!format!("{u:?}").contains("secret"));
        assert_eq!(u.settings().connect_timeout, Duration::from_secs(3));
        let u = PgUrl::parse("postgresql://me@%2Ftmp%2Fpg/logs").unwrap();
        assert_eq!(u.shown(), "postgres://me@%2Ftmp%2Fpg:5432/logs");
        let u = PgUrl::parse("postgresql://me@/logs?host=/run/pg&port=7000&password=x").unwrap();
        assert_eq!(u.shown(), "postgres://me@%2Frun%2Fpg:7000/logs?host=/run/pg&port=7000");
        let u = PgUrl::parse("postgres://me:pw@a:1,b:2/db?target_session_attrs=read-write&pool_size=3&lease_time=4").unwrap();
        assert_eq!(u.shown(), "postgres://me@a:1,b:2/db?target_session_attrs=read-write&pool_size=3&lease_time=4");
        assert_eq!(u.settings().pool_size, 3);
        assert_eq!(u.settings().lease_time, Duration::from_secs(4));
        assert_eq!(single_host(&u.config, 1).get_ports(), &[2]);
        // One day is the longest bound a URL sets.
        let u = PgUrl::parse("postgres://me@h/db?query_timeout=86400&lease_time=86400").unwrap();
        assert_eq!((u.settings().query_timeout, u.settings().lease_time), (Duration::from_secs(86_400), Duration::from_secs(86_400)));
    }

    #[test]
    fn tls_modes_follow_libpq() {
        let u = PgUrl::parse("postgres://me@h/db").unwrap();
        assert_eq!(u.tls().mode, SslMode::Prefer);
        let u = PgUrl::parse("postgres://me@h/db?sslmode=require").unwrap();
        assert_eq!(u.tls().mode, SslMode::Require);
        let u = PgUrl::parse("postgres://me@h/db?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(u.tls().mode, SslMode::VerifyCa, "require with a root certificate verifies the chain");
        let u = PgUrl::parse("postgres://me@h/db?sslmode=verify-full&sslrootcert=/ca.pem").unwrap();
        assert_eq!(u.tls().mode, SslMode::VerifyFull);
        assert_eq!(u.config.get_ssl_mode(), ClientSslMode::Require);
    }

    #[test]
    fn a_transaction_pooler_turns_off_prepared_statements_and_the_liveness_lock() {
        let d = PgUrl::parse("postgres://me@h/db").unwrap();
        assert!(d.settings().prepared && d.settings().fast_takeover);
        let p = PgUrl::parse("postgres://me@h/db?pooler=transaction").unwrap();
        assert!(!p.settings().prepared && !p.settings().fast_takeover);
        let p = PgUrl::parse("postgres://me@h/db?pooler=transaction&fast_takeover=on").unwrap();
        assert!(!p.settings().prepared && p.settings().fast_takeover);
    }

    #[test]
    fn pools_are_shared_by_equal_urls_whatever_the_session() {
        let a = PgUrl::parse("postgres://me:pw@h/db?session=a").unwrap();
        let b = PgUrl::parse("postgres://me:pw@h/db?session=b").unwrap();
        let c = PgUrl::parse("postgres://me:other@h/db?session=b").unwrap();
        assert_eq!(a.pool_key, b.pool_key);
        assert_ne!(a.pool_key, c.pool_key);
    }

    #[test]
    fn bad_urls_are_invalid_input() {
        for (url, why) in [
            ("mysql://x@h/db", "not a postgres"),
            ("postgres://h/db", "names no user"),
            ("postgres://u@/db", "names no host"),
            ("postgres://u@h/db?bogus=1", "cannot parse"),
            ("postgres://u@h/db?session=", "session parameter is empty"),
            ("postgres://u@h/db?session=%zz", "percent-encoded"),
            ("postgres://u:pa%zzss@h/db", "percent escape"),
            ("postgres://u:pass%4@h/db", "percent escape"),
            ("postgres://u@h/db?password=a%2", "percent escape"),
            ("postgres://u@h/db?sslmode=verify-full", "needs sslrootcert"),
            ("postgres://u@h/db?sslmode=bogus", "expected disable"),
            ("postgres://u@h/db?sslcert=/c.pem", "both sslcert"),
            ("postgres://u@h/db?sslpassword=x", "not supported"),
            ("postgres://u@h/db?pool_size=0", "from 1 to"),
            ("postgres://u@h/db?query_timeout=0", "more than 0"),
            ("postgres://u@h/db?connect_timeout=-1", "more than 0"),
            // Above a day: the limit is in the message.
            ("postgres://u@h/db?query_timeout=86400.5", "more than 0 and at most 86400 (one day"),
            ("postgres://u@h/db?lease_timeout=100000", "at most 86400"),
            ("postgres://u@h/db?lease_time=86401", "at least 1 and at most 86400"),
            ("postgres://u@h/db?lease_time=0.5", "at least 1"),
            ("postgres://u@h/db?fast_takeover=maybe", "on or off"),
            ("postgres://u@h/db?pooler=statement", "expected transaction"),
            ("postgres://u@h:notaport/db", "cannot parse"),
        ] {
            let e = PgUrl::parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
            assert!(e.message().contains(why), "{url}: {}", e.message());
            assert!(!e.message().contains("pa%zzss") && !e.message().contains("pass%4"), "{url}: the password is not shown");
        }
    }
}
