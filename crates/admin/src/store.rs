//! The document store on disk: one YAML file per document in one folder (`api-orders.yaml`,
//! `upstream-orders.yaml`, `consumer-alice.yaml`, `global.yaml`), which the configuration loads
//! like any other folder of files. Writes are atomic (a temporary file renamed over the old one,
//! both synced), so a crash leaves either the old document or the new one.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The kinds of documents the admin API manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `api:` documents, by `name`.
    Api,
    /// `upstream:` documents, by `name`.
    Upstream,
    /// `consumer:` documents, by `name`.
    Consumer,
    /// The `global:` policy list (one document).
    Globals,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::Api, Kind::Upstream, Kind::Consumer, Kind::Globals];

    /// The collection's name in URLs (`apis`).
    pub fn collection(self) -> &'static str {
        match self {
            Kind::Api => "apis",
            Kind::Upstream => "upstreams",
            Kind::Consumer => "consumers",
            Kind::Globals => "globals",
        }
    }

    /// The kind for a collection name.
    pub fn from_collection(c: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.collection() == c)
    }

    /// The document's top-level key (`api`).
    pub fn key(self) -> &'static str {
        match self {
            Kind::Api => "api",
            Kind::Upstream => "upstream",
            Kind::Consumer => "consumer",
            Kind::Globals => "global",
        }
    }

    /// The kind of a document's top-level key.
    pub fn from_key(k: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.key() == k)
    }

    /// The name of the only `global` document.
    pub const GLOBALS: &'static str = "global";
}

/// Whether `name` may name a stored document: 1 to 128 letters, digits, `.`, `_` and `-`,
/// starting with a letter or digit.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A folder of documents.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// The store in `root`, created if missing.
    pub fn open(root: &Path) -> std::io::Result<DirStore> {
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        Ok(DirStore { root })
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of a document.
    pub fn path(&self, kind: Kind, name: &str) -> PathBuf {
        match kind {
            Kind::Globals => self.root.join("global.yaml"),
            _ => self.root.join(format!("{}-{name}.yaml", kind.key())),
        }
    }

    /// The kind and name of a file of the store, if it is one.
    pub fn document_of(&self, path: &Path) -> Option<(Kind, String)> {
        if path.parent() != Some(self.root.as_path()) {
            return None;
        }
        let stem = path.file_name()?.to_str()?.strip_suffix(".yaml")?;
        if stem == "global" {
            return Some((Kind::Globals, Kind::GLOBALS.to_owned()));
        }
        let (key, name) = stem.split_once('-')?;
        let kind = Kind::from_key(key).filter(|k| *k != Kind::Globals)?;
        valid_name(name).then(|| (kind, name.to_owned()))
    }

    /// The text of a document, if stored.
    pub fn read(&self, kind: Kind, name: &str) -> std::io::Result<Option<String>> {
        checked(name)?;
        match std::fs::read_to_string(self.path(kind, name)) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every stored document: kind, name and text, in file name order.
    pub fn list(&self) -> std::io::Result<Vec<(Kind, String, String)>> {
        let mut out = Vec::new();
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        paths.sort();
        for p in paths {
            if let Some((kind, name)) = self.document_of(&p) {
                out.push((kind, name, std::fs::read_to_string(&p)?));
            }
        }
        Ok(out)
    }

    /// Writes a document atomically.
    pub fn write(&self, kind: Kind, name: &str, text: &str) -> std::io::Result<()> {
        checked(name)?;
        let path = self.path(kind, name);
        let tmp = self.root.join(format!(".{}.tmp", path_name(&path)));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        self.sync_dir()
    }

    /// Removes a document; true when there was one.
    pub fn remove(&self, kind: Kind, name: &str) -> std::io::Result<bool> {
        checked(name)?;
        match std::fs::remove_file(self.path(kind, name)) {
            Ok(()) => {
                self.sync_dir()?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self) -> std::io::Result<()> {
        std::fs::File::open(&self.root)?.sync_all()
    }
}

/// Names reach file names: anything but a valid name is refused before it touches the disk.
fn checked(name: &str) -> std::io::Result<()> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{name}` is not a valid document name"),
        ))
    }
}

fn path_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("orders"));
        assert!(valid_name("orders-v2.internal_1"));
        assert!(!valid_name(""));
        assert!(!valid_name("-x"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("../x"));
        assert!(!valid_name(&"a".repeat(129)));
    }

    #[test]
    fn write_read_list_remove() {
        let dir = tempfile::tempdir().unwrap();
        let s = DirStore::open(&dir.path().join("store")).unwrap();
        s.write(Kind::Api, "orders", "api: {port: 1}\n").unwrap();
        s.write(Kind::Globals, Kind::GLOBALS, "global: []\n")
            .unwrap();
        s.write(Kind::Consumer, "alice", "consumer: {name: alice}\n")
            .unwrap();
        std::fs::write(s.root().join("notes.txt"), "x").unwrap();
        assert_eq!(
            s.read(Kind::Api, "orders").unwrap().as_deref(),
            Some("api: {port: 1}\n")
        );
        let listed: Vec<(Kind, String)> = s
            .list()
            .unwrap()
            .into_iter()
            .map(|(k, n, _)| (k, n))
            .collect();
        assert_eq!(
            listed,
            vec![
                (Kind::Api, "orders".to_owned()),
                (Kind::Consumer, "alice".to_owned()),
                (Kind::Globals, "global".to_owned())
            ]
        );
        s.write(Kind::Api, "orders", "api: {port: 2}\n").unwrap();
        assert_eq!(
            s.read(Kind::Api, "orders").unwrap().as_deref(),
            Some("api: {port: 2}\n")
        );
        assert!(s.remove(Kind::Api, "orders").unwrap());
        assert!(!s.remove(Kind::Api, "orders").unwrap());
        assert!(s.write(Kind::Api, "../escape", "x").is_err());
        assert!(s.read(Kind::Api, "a/b").is_err());
        assert_eq!(s.read(Kind::Api, "orders").unwrap(), None);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(s.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }
}
