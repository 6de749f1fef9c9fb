//! Documents that a configuration names by URL: OpenAPI specs, WSDLs and their schemas, JSON Web
//! Key Sets. They are fetched while a configuration loads (and, for a key set, by its refresh
//! thread), never on a request's path.

use std::time::Duration;

/// How long one fetch may take, from connecting to the end of the body.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A fetch that failed: the request (connection, TLS, an HTTP status other than 2xx) or the
/// reading of the body (too large, cut short). Either way the message names the URL.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The request did not get a successful response.
    #[error("fetching `{url}` failed: {reason}")]
    Request {
        /// The URL fetched.
        url: String,
        /// What went wrong, in the HTTP client's words.
        reason: String,
    },
    /// The response's body could not be read whole within the limit.
    #[error("reading `{url}` failed: {reason}")]
    Body {
        /// The URL fetched.
        url: String,
        /// What went wrong, in the HTTP client's words.
        reason: String,
    },
}

/// What a fetch asks for and takes: the media types it sends as `Accept`, and the most bytes
/// of body it reads.
#[derive(Debug, Clone, Copy)]
pub struct Wanted {
    /// The `Accept` field of the request.
    pub accept: &'static str,
    /// Bodies longer than this are an error.
    pub max_bytes: u64,
}

/// Fetches an `http://` or `https://` URL with a GET (HTTPS verified against the bundled web
/// roots) within [`FETCH_TIMEOUT`]. Returns the body when the status is 2xx and the body fits
/// in `wanted.max_bytes`.
pub fn http_get(url: &str, wanted: Wanted) -> Result<Vec<u8>, FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .build()
        .into();
    let mut res = agent
        .get(url)
        .header("Accept", wanted.accept)
        .call()
        .map_err(|e| FetchError::Request {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    res.body_mut()
        .with_config()
        .limit(wanted.max_bytes)
        .read_to_vec()
        .map_err(|e| FetchError::Body {
            url: url.to_owned(),
            reason: e.to_string(),
        })
}

/// [`http_get`] for a text document: the body must be UTF-8.
pub fn http_get_text(url: &str, wanted: Wanted) -> Result<String, FetchError> {
    String::from_utf8(http_get(url, wanted)?).map_err(|_| FetchError::Body {
        url: url.to_owned(),
        reason: "the document is not UTF-8".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Serves one request with `response` and returns the request's head.
    fn serve_once(response: Vec<u8>) -> (u16, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed before its request ended");
                req.extend_from_slice(&buf[..n]);
            }
            s.write_all(&response).unwrap();
            String::from_utf8(req).unwrap()
        });
        (port, server)
    }

    /// The error's message says what step failed (`fetching` or `reading`) and names `url`.
    fn assert_names(e: &FetchError, step: &str, url: &str) {
        let prefix = format!("{step} `{url}` failed: ");
        assert!(e.to_string().starts_with(&prefix), "{e}");
    }

    const JSON: Wanted = Wanted {
        accept: "application/json",
        max_bytes: 16,
    };

    #[test]
    fn returns_the_body_and_sends_the_accept_field() {
        let (port, server) = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"a\": 1}\n".into(),
        );
        let body = http_get(&format!("http://127.0.0.1:{port}/keys"), JSON).unwrap();
        assert_eq!(body, b"{\"a\": 1}\n");
        let head = server.join().unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /keys http/1.1\r\n"), "{head}");
        assert!(head.contains("\r\naccept: application/json\r\n"), "{head}");
    }

    #[test]
    fn a_text_document_must_be_utf8() {
        let (port, server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n\xff\xfe".to_vec(),
        );
        let url = format!("http://127.0.0.1:{port}/bin");
        let e = http_get_text(&url, JSON).unwrap_err();
        assert!(matches!(e, FetchError::Body { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("reading `{url}` failed: the document is not UTF-8")
        );
        server.join().unwrap();
    }

    #[test]
    fn a_body_over_the_limit_is_an_error_naming_the_url() {
        let body = "x".repeat(17);
        let (port, server) = serve_once(
            format!("HTTP/1.1 200 OK\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{body}")
                .into_bytes(),
        );
        let url = format!("http://127.0.0.1:{port}/big");
        let e = http_get(&url, JSON).unwrap_err();
        assert!(matches!(e, FetchError::Body { .. }), "{e:?}");
        assert_names(&e, "reading", &url);
        server.join().unwrap();
    }

    #[test]
    fn a_status_other_than_2xx_is_an_error_naming_the_url() {
        let (port, server) = serve_once(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
        );
        let url = format!("http://127.0.0.1:{port}/gone");
        let e = http_get(&url, JSON).unwrap_err();
        assert!(matches!(e, FetchError::Request { .. }), "{e:?}");
        assert!(e.to_string().contains("404"), "{e}");
        assert_names(&e, "fetching", &url);
        server.join().unwrap();
    }

    #[test]
    fn an_unreachable_host_is_an_error() {
        // Port 1 on loopback: nothing listens there.
        let e = http_get("http://127.0.0.1:1/x", JSON).unwrap_err();
        assert!(matches!(e, FetchError::Request { .. }), "{e:?}");
    }
}
