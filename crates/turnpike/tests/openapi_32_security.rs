//! OpenAPI 3.2 (`query` operations, `in: querystring` parameters) and Membrane's
//! `validateSecurity`, through real sockets, with Membrane's configurations and specs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

/// Writes `files` into `dir` and starts a gateway from `yaml` written there as `apis.yaml`
/// (relative locations are read beside it, as in Membrane's examples).
fn start_in(dir: tempfile::TempDir, files: &[(&str, String)], yaml: &str) -> TestGateway {
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let file = dir.path().join("apis.yaml");
    std::fs::write(&file, yaml).unwrap();
    let gateway = turnpike::start(vec![file.clone()]).unwrap_or_else(|e| panic!("{e}"));
    TestGateway {
        gateway: Some(gateway),
        dir,
        file,
    }
}

fn load_error(dir: &Path, files: &[(&str, String)], yaml: &str) -> String {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let file = dir.join("apis.yaml");
    std::fs::write(&file, yaml).unwrap();
    match turnpike::start(vec![file]) {
        Ok(_) => panic!("the configuration loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut r = req(method, path);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    send(
        addr,
        r.body(Full::new(Bytes::from(body.to_owned()))).unwrap(),
    )
    .await
}

fn messages(r: &Reply) -> Vec<String> {
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect()
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// Membrane's `tutorials/openapi/v32/query-method.oas.yaml`, its server replaced.
fn query_method_oas(server: &str) -> String {
    format!(
        r#"openapi: 3.2.0
info:
  title: OpenAPI 3.2 QUERY Method
  version: 1.0.0
servers:
  - url: {server}
paths:
  /search:
    # New in OpenAPI 3.2: the QUERY method is a read operation that carries a request body.
    query:
      requestBody:
        content:
          application/json:
            schema:
              type: object
              required: [term]
              properties:
                term:
                  type: string
                limit:
                  type: integer
                  minimum: 1
      responses:
        '200':
          description: Search results
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_method_is_validated_and_forwarded_with_its_body() {
    let backend = Backend::start().await;
    // Membrane's `10-QUERY-Method.apis.yaml` (the API; the backend is the recording one).
    let yaml = "api:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: query-method.oas.yaml\n      validateRequests: true\n";
    let spec = query_method_oas(&format!("http://127.0.0.1:{}", backend.port()));
    let gw = start_in(
        tempfile::tempdir().unwrap(),
        &[("query-method.oas.yaml", spec)],
        yaml,
    );
    let a = gw.addr();
    let body = r#"{"term":"shoes"}"#;
    let r = call(a, "QUERY", "/search", &[JSON], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = backend.last();
    assert_eq!(seen.method, "QUERY");
    assert_eq!(seen.uri, "/search");
    assert_eq!(seen.body, body);
    assert_eq!(r.text(), body, "the backend's echo comes back");

    let r = call(a, "QUERY", "/search", &[JSON], "{}").await;
    assert_eq!(r.status, 400);
    assert!(
        messages(&r)[0].contains("\"term\" is a required property"),
        "{}",
        r.text()
    );
    let r = call(a, "QUERY", "/search", &[JSON], r#"{"term":"x","limit":0}"#).await;
    assert_eq!(r.status, 400);

    // A path without a `query` operation, and a method the path does not have.
    let r = call(a, "GET", "/search", &[], "").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("QUERY"));
    assert_eq!(backend.count(), 1, "nothing invalid reached the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn querystring_parameter_validates_the_whole_query() {
    let mock = free_port();
    let api = free_port();
    // Membrane's `30-Querystring-Parameter.apis.yaml` with its mock backend, on free ports.
    let yaml = format!(
        r#"api:
  port: {api}
  ip: 127.0.0.1
  openapi:
    - location: querystring.oas.yaml
      validateRequests: true

---
# Mock backend
api:
  port: {mock}
  ip: 127.0.0.1
  path:
    uri: /products
  flow:
    - static:
        contentType: application/json
        src: '{{ "products": ["Steel-toed Slippers", "Waterproof Sponge Sandals"] }}'
    - return:
        status: 200
"#
    );
    // Membrane's `querystring.oas.yaml`, its server on the mock's port.
    let spec = format!(
        r#"openapi: 3.2.0
info:
  title: OpenAPI 3.2 querystring Parameter
  version: 1.0.0
servers:
  - url: http://127.0.0.1:{mock}
paths:
  /products:
    get:
      parameters:
        # New in OpenAPI 3.2: in: querystring describes the whole query string as one value.
        - name: filter
          in: querystring
          content:
            application/x-www-form-urlencoded:
              schema:
                type: object
                required: [term]
                properties:
                  term:
                    type: string
                  page:
                    type: integer
                    minimum: 1
      responses:
        '200':
          description: Matching products
"#
    );
    let gw = start_in(
        tempfile::tempdir().unwrap(),
        &[("querystring.oas.yaml", spec)],
        &yaml,
    );
    let a = gw.addr_of(api);
    let r = get(a, "/products?term=boots&page=2").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["products"][0],
        "Steel-toed Slippers",
        "the mock answered"
    );
    let r = get(a, "/products?page=2").await;
    assert_eq!(r.status, 400);
    assert!(
        messages(&r)[0].contains("\"term\" is a required property"),
        "{}",
        r.text()
    );
    assert_eq!(r.json()["errors"][0]["location"], "querystring.filter");
    let r = get(a, "/products?term=boots&page=0").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["errors"][0]["location"], "querystring.filter/page");
    assert_eq!(get(a, "/products").await.status, 400);
}

/// The part of Membrane's `fruitshop-api-v2-openapi-3-security.yml` that the API-key example
/// uses: global `security: [http: []]`, writes need the scope `write`, the scheme `http` is an
/// API key in the header `X-API-KEY`.
fn fruitshop_security_oas(server: &str) -> String {
    format!(
        r##"openapi: 3.0.3
info:
  title: Fruit Shop API
  version: 2.0.0
servers:
  - url: {server}/shop/v2
security:
  - http: []
paths:
  /products:
    get:
      operationId: getProducts
      parameters:
        - $ref: "#/components/parameters/Limit"
      responses:
        '200':
          description: OK
    post:
      operationId: createProduct
      security:
        - http:
          - write
      requestBody:
        $ref: "#/components/requestBodies/Product"
      responses:
        '201':
          description: Created
  /products/{{id}}:
    parameters:
      - $ref: "#/components/parameters/Id"
    get:
      operationId: getProduct
      responses:
        '200':
          description: OK
    delete:
      operationId: deleteProduct
      security:
        - http:
            - write
      responses:
        '200':
          description: OK
components:
  parameters:
    Id:
      name: id
      in: path
      required: true
      schema:
        type: integer
        minimum: 1
    Limit:
      name: limit
      in: query
      schema:
        minimum: 1
        type: number
  requestBodies:
    Product:
      content:
        application/json:
          schema:
            $ref: '#/components/schemas/Product'
  schemas:
    Product:
      type: object
      required:
        - name
        - price
      properties:
        name:
          type: string
          maxLength: 30
        price:
          type: number
          minimum: 0
  securitySchemes:
    http:
      type: apiKey
      in: header
      name: X-API-KEY
"##
    )
}

const DEMO_KEYS: &str = "# Simple key without any scope\n111\n# Keys associated with roles/scopes\n222: write\n333: write,delete";

/// Membrane's `tutorials/api-keys/30-API-Key-OpenAPI.yaml` (on port 0, with the spec's server
/// pointing at the recording backend).
const API_KEY_OPENAPI: &str = r#"api:
  port: 0
  ip: 127.0.0.1
  openapi:
    - location: fruitshop-api-v2-openapi-3-security.yml
      validateSecurity: true
  flow:
    - apiKey:
        required: false  # key is optional here; OpenAPI validator enforces requirements per endpoint
        stores:
          - apiKeyFileStore:
              location: ./demo-keys.txt
        extractors:
          - header: X-Api-Key
    - openapiValidator: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_with_scopes_checked_against_the_specs_security() {
    let backend = Backend::start().await;
    let spec = fruitshop_security_oas(&format!("http://127.0.0.1:{}", backend.port()));
    let gw = start_in(
        tempfile::tempdir().unwrap(),
        &[
            ("fruitshop-api-v2-openapi-3-security.yml", spec),
            ("demo-keys.txt", DEMO_KEYS.to_owned()),
        ],
        API_KEY_OPENAPI,
    );
    let a = gw.addr();
    let product = r#"{"name":"Mangos","price":2.79}"#;

    let r = call(a, "GET", "/shop/v2/products", &[], "").await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:unauthorized");
    assert_eq!(messages(&r), ["Authentication by API key is required."]);
    assert_eq!(r.json()["errors"][0]["location"], "security.http");

    let key = |k: &'static str| [("x-api-key", k), JSON];
    let r = call(a, "GET", "/shop/v2/products", &key("111"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(a, "GET", "/shop/v2/products/7", &key("111"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(a, "POST", "/shop/v2/products", &key("111"), product).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["type"], "urn:turnpike:problem:forbidden");
    assert_eq!(messages(&r), ["Caller is not in scope write"]);
    let r = call(a, "DELETE", "/shop/v2/products/7", &key("111"), "").await;
    assert_eq!(r.status, 403);

    let r = call(a, "POST", "/shop/v2/products", &key("222"), product).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = backend.last();
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("POST", "/shop/v2/products")
    );
    assert_eq!(seen.body, product);
    let r = call(a, "DELETE", "/shop/v2/products/7", &key("333"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());

    // validateSecurity validates the requests too.
    let r = call(
        a,
        "POST",
        "/shop/v2/products",
        &key("222"),
        r#"{"name":"Mangos"}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = call(a, "GET", "/shop/v2/products?limit=0", &key("111"), "").await;
    assert_eq!(r.status, 400, "{}", r.text());
    // An unknown key is refused by `apiKey` itself.
    let r = call(a, "GET", "/shop/v2/products", &key("999"), "").await;
    assert_eq!(r.status, 403);
    assert_eq!(
        backend.count(),
        4,
        "only the allowed requests reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_follows_x_membrane_validation_and_is_off_by_default() {
    let backend = Backend::start().await;
    let server = format!("http://127.0.0.1:{}", backend.port());
    let flow = "  flow:\n    - apiKey:\n        required: false\n        stores:\n          - apiKeyFileStore:\n              location: demo-keys.txt\n    - openapiValidator: {}\n";
    let files = |spec: String| vec![("shop.yml", spec), ("demo-keys.txt", DEMO_KEYS.to_owned())];
    // Without `validateSecurity` (and without the extension) nothing is checked.
    let yaml =
        format!("api:\n  port: 0\n  ip: 127.0.0.1\n  openapi:\n    - location: shop.yml\n{flow}");
    let gw = start_in(
        tempfile::tempdir().unwrap(),
        &files(fruitshop_security_oas(&server)),
        &yaml,
    );
    let r = call(gw.addr(), "POST", "/shop/v2/products", &[JSON], "{}").await;
    assert_eq!(
        r.status,
        200,
        "neither security nor the body is checked: {}",
        r.text()
    );
    drop(gw);

    // `asInOpenAPI` (the default) follows `x-membrane-validation.security`.
    let spec = fruitshop_security_oas(&server).replace(
        "security:\n  - http: []\n",
        "security:\n  - http: []\nx-membrane-validation:\n  security: true\n",
    );
    let gw = start_in(tempfile::tempdir().unwrap(), &files(spec.clone()), &yaml);
    let r = call(gw.addr(), "GET", "/shop/v2/products", &[], "").await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = call(
        gw.addr(),
        "GET",
        "/shop/v2/products",
        &[("x-api-key", "111")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    drop(gw);
    let off = yaml.replace(
        "location: shop.yml\n",
        "location: shop.yml\n      validateSecurity: no\n",
    );
    let gw = start_in(tempfile::tempdir().unwrap(), &files(spec), &off);
    let r = call(gw.addr(), "GET", "/shop/v2/products", &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_security_and_misplaced_validators_are_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |scheme: &str| {
        format!(
            "openapi: 3.1.0\ninfo: {{title: t, version: '1'}}\nservers: [{{url: 'http://127.0.0.1:1'}}]\nsecurity: [{{client: []}}]\npaths:\n  /a:\n    get:\n      responses: {{'200': {{description: ok}}}}\ncomponents:\n  securitySchemes:\n    client: {scheme}\n"
        )
    };
    let yaml = "api:\n  port: 0\n  openapi:\n    - location: s.yml\n      validateSecurity: yes\n";
    let e = load_error(dir.path(), &[("s.yml", spec("{type: mutualTLS}"))], yaml);
    assert!(e.contains("openapi[0].validateSecurity"), "{e}");
    assert!(e.contains("`client` is of type `mutualTLS`"), "{e}");
    let e = load_error(
        dir.path(),
        &[("s.yml", spec("{type: http, scheme: digest}"))],
        yaml,
    );
    assert!(e.contains("`client` uses the HTTP scheme `digest`"), "{e}");
    // The same spec loads when security is not checked.
    let ok = yaml.replace("validateSecurity: yes", "validateSecurity: asInOpenAPI");
    std::fs::write(dir.path().join("apis.yaml"), &ok).unwrap();
    turnpike::start(vec![dir.path().join("apis.yaml")]).unwrap();

    let good = spec("{type: apiKey, in: header, name: X-Key}");
    let e = load_error(
        dir.path(),
        &[("s.yml", good.clone())],
        &yaml.replace("validateSecurity: yes", "validateSecurity: sometimes"),
    );
    assert!(e.contains("validateSecurity"), "{e}");
    let e = load_error(
        dir.path(),
        &[("s.yml", good.clone())],
        &format!("{yaml}  flow:\n    - openapiValidator: {{}}\n    - openapiValidator: {{}}\n"),
    );
    assert!(e.contains("may stand only once"), "{e}");
    let e = load_error(
        dir.path(),
        &[("s.yml", good.clone())],
        &format!("{yaml}  flow:\n    - openapiValidator: {{validateRequests: true}}\n"),
    );
    assert!(e.contains("takes no settings here"), "{e}");
    // Outside an API deployed from `openapi:` it is Membrane's policy Turnpike does not have.
    let e = load_error(
        dir.path(),
        &[],
        "api:\n  port: 0\n  flow:\n    - openapiValidator: {}\n    - return: {status: 200}\n",
    );
    assert!(
        e.contains("Membrane's `openapiValidator` is not supported"),
        "{e}"
    );
}
