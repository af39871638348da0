//! Where each Postgres test's own database comes from and goes to, off the tests' critical path.
//!
//! Measured (CI's suite, ~290 Postgres tests): each test's `CREATE DATABASE` from `template1`, the app's migrations
//! on it and its `DROP DATABASE` on the test's own thread cost about 0.7 s of every test. So:
//! - each database is a copy of a **template** migrated once (named after the migrations' content, so a changed
//!   migration gets a template of its own, and built under a name of its own then renamed, so two test processes
//!   never copy a half-migrated one); the app's own `migrate` then finds nothing to do;
//! - a test's database is **dropped by a thread of its own**, not the test's. A process that exits before that
//!   thread is done leaves databases behind: their names carry the process's id, and the next process to start
//!   drops those whose process is gone (never another live process's).

use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, PgConnection};

use pidevops::config::DatabaseUrl;
use pidevops::eventlog::EventStore;

const PREFIX: &str = "pidevops_test_";
const TEMPLATE_PREFIX: &str = "pidevops_template_";

/// The name of a new test database of this process.
pub fn new_name() -> String {
    format!(
        "{PREFIX}{}_{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The migrations' content, as the template's name keeps it.
fn migrations_digest() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a migration file").path())
        .collect();
    files.sort();
    let mut digest = Sha256::new();
    for file in files {
        digest.update(file.file_name().expect("a file name").as_encoded_bytes());
        digest.update(std::fs::read(&file).expect("a migration's text"));
    }
    hex::encode(&digest.finalize()[..8])
}

/// The migrated template this process's databases are copied from: made once per migrations' content.
pub async fn template(admin: &str) -> &'static str {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            sweep(admin).await;
            let name = format!("{TEMPLATE_PREFIX}{}", migrations_digest());
            if !exists(admin, &name).await {
                build_template(admin, &name).await;
            }
            name
        })
        .await
}

async fn exists(admin: &str, name: &str) -> bool {
    let mut conn = PgConnection::connect(admin)
        .await
        .expect("connect to the admin database");
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .expect("look the template up")
}

/// Migrates a database of this process's own and renames it `name`; another process that got there first wins.
async fn build_template(admin: &str, name: &str) {
    let building = format!("{TEMPLATE_PREFIX}building_{}", std::process::id());
    let mut conn = PgConnection::connect(admin)
        .await
        .expect("connect to the admin database");
    conn.execute(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)").as_str())
        .await
        .expect("drop a stale template under construction");
    conn.execute(format!("CREATE DATABASE {building}").as_str())
        .await
        .expect("create the template");
    {
        let url = DatabaseUrl::Postgres(super::with_database(admin, &building));
        let store = EventStore::connect(&url, 1)
            .await
            .expect("connect to the template");
        store.migrate().await.expect("migrate the template");
        if let EventStore::Postgres(store) = &store {
            store.close().await;
        }
    }
    if conn
        .execute(format!("ALTER DATABASE {building} RENAME TO {name}").as_str())
        .await
        .is_err()
    {
        // Another process made it meanwhile.
        conn.execute(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)").as_str())
            .await
            .expect("drop this process's duplicate template");
    }
}

/// Drops the test databases (and templates under construction) of processes that are gone.
async fn sweep(admin: &str) {
    let mut conn = PgConnection::connect(admin)
        .await
        .expect("connect to the admin database");
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'pidevops\\_test\\_%' \
         OR datname LIKE 'pidevops\\_template\\_building\\_%'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("list the test databases");
    for name in names {
        let Some(pid) = owner(&name) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await;
        }
    }
}

/// The id of the process that made database `name`, when its name says.
fn owner(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(PREFIX)
        .or_else(|| name.strip_prefix(&format!("{TEMPLATE_PREFIX}building_")))?;
    rest.split('_').next()?.parse().ok()
}

/// Hands database `name` to the dropping thread; the test goes on at once.
pub fn drop_later(name: String) {
    static DROPPER: OnceLock<Mutex<mpsc::Sender<String>>> = OnceLock::new();
    let sender = DROPPER.get_or_init(|| {
        let (sender, names) = mpsc::channel::<String>();
        let admin = super::postgres_admin_url();
        std::thread::Builder::new()
            .name("test-db-dropper".to_owned())
            .spawn(move || drop_each(&admin, names))
            .expect("the dropping thread");
        Mutex::new(sender)
    });
    if let Ok(sender) = sender.lock() {
        let _ = sender.send(name);
    }
}

fn drop_each(admin: &str, names: mpsc::Receiver<String>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let mut conn = PgConnection::connect(admin).await.ok();
        for name in names {
            if conn.is_none() {
                conn = PgConnection::connect(admin).await.ok();
            }
            let Some(c) = conn.as_mut() else { continue };
            if c.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await
                .is_err()
            {
                conn = None;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_databases_owner_is_read_from_its_name() {
        assert_eq!(super::owner("pidevops_test_4242_abcdef"), Some(4242));
        assert_eq!(super::owner("pidevops_template_building_17"), Some(17));
        assert_eq!(super::owner("pidevops_test_abcdef"), None);
        assert_eq!(super::owner("pidevops_template_0123abcd"), None);
    }
}
