use super::*;
use std::io::{Read, Write};

#[test]
fn bundles_refs_to_other_files_and_locates_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("main.yaml"),
        "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        '200':\n          $ref: 'common/defs.yaml#/responses/Ok'\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("common")).unwrap();
    std::fs::write(
        dir.path().join("common/defs.yaml"),
        "responses:\n  Ok:\n    description: ok\n    content:\n      application/json:\n        schema:\n          $ref: '#/schemas/Thing'\nschemas:\n  Thing:\n    type: object\n",
    )
    .unwrap();
    let spec = load(&Source::File(dir.path().join("main.yaml"))).unwrap();
    assert_eq!(
        spec.doc["paths"]["/a"]["get"]["responses"]["200"]["$ref"],
        "#/x-turnpike-bundled/0/responses/Ok"
    );
    assert_eq!(
        spec.doc[BUNDLED][0]["responses"]["Ok"]["content"]["application/json"]["schema"]["$ref"],
        "#/x-turnpike-bundled/0/schemas/Thing"
    );
    let at = spec.locate("#/x-turnpike-bundled/0/schemas/Thing/type");
    assert!(at.ends_with("defs.yaml:10:11: schemas.Thing.type"), "{at}");
    let at = spec.locate("#/paths/~1a/get");
    assert!(
        at.contains("main.yaml:") && at.ends_with(": paths./a.get"),
        "{at}"
    );
}

#[test]
fn missing_files_and_https_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), "x:\n  $ref: 'nope.yaml'\n").unwrap();
    let e = load(&Source::File(dir.path().join("m.yaml"))).unwrap_err();
    assert!(e.message.contains("nope.yaml"), "{e}");
    assert_eq!(
        source_of("https://x/y.yaml", dir.path()).unwrap(),
        Source::Url("https://x/y.yaml".into())
    );
    assert!(list_dir(dir.path()).unwrap().len() == 1);
}

#[test]
fn fetches_http_specs_and_their_references() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut paths = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0);
                req.extend_from_slice(&buf[..n]);
            }
            let req = String::from_utf8_lossy(&req).into_owned();
            let path = req.split_whitespace().nth(1).unwrap().to_owned();
            let body = if path == "/specs/main.yaml" {
                "openapi: 3.0.3\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'common.yaml#/B'}\n"
            } else {
                "B: {type: string}\n"
            };
            write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Type: application/yaml\r\n\r\n{body}"
            )
            .unwrap();
            paths.push(path);
        }
        paths
    });
    let spec = load(&Source::Url(format!(
        "http://127.0.0.1:{port}/specs/main.yaml"
    )))
    .unwrap();
    assert_eq!(
        spec.doc["components"]["schemas"]["A"]["$ref"],
        "#/x-turnpike-bundled/0/B"
    );
    assert_eq!(spec.doc[BUNDLED][0]["B"]["type"], "string");
    assert_eq!(
        server.join().unwrap(),
        ["/specs/main.yaml", "/specs/common.yaml"]
    );
    assert!(fetch(&format!("http://127.0.0.1:{port}/gone")).is_err());
}

fn load_str(dir: &Path, files: &[(&str, &str)]) -> Result<LoadedSpec, SpecError> {
    for (name, text) in files {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, text).unwrap();
    }
    load(&Source::File(dir.join(files[0].0)))
}

#[test]
fn refs_to_ids_and_anchors_resolve_inside_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let spec = load_str(
        dir.path(),
        &[(
            "api.yaml",
            r##"openapi: 3.1.0
paths:
  /a:
    post:
      requestBody:
        content:
          application/json:
            schema: {$ref: 'https://example.com/schemas/cat'}
          application/xml:
            schema: {$ref: 'schemas/item.json'}
components:
  schemas:
    Pet:
      $id: https://example.com/schemas/pet
      properties:
        name: {$anchor: petName, type: string}
        self: {$ref: '#'}
        tag: {$ref: '#/$defs/Tag'}
        other: {$ref: '#/components/schemas/Item'}
      $defs:
        Tag: {type: string}
    Cat:
      $id: https://example.com/schemas/cat
      allOf:
        - $ref: pet
        - properties:
            nick: {$ref: 'pet#petName'}
            tag: {$ref: 'pet#/$defs/Tag'}
    Item:
      $id: schemas/item.json
      properties:
        sub: {$ref: 'sub.json'}
    Sub:
      $id: schemas/sub.json
      type: integer
      examples: [{$id: not-an-id}]
"##,
        )],
    )
    .unwrap();
    let d = &spec.doc;
    let s = &d["components"]["schemas"];
    assert_eq!(
        d["paths"]["/a"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Cat"
    );
    assert_eq!(
        d["paths"]["/a"]["post"]["requestBody"]["content"]["application/xml"]["schema"]["$ref"],
        "#/components/schemas/Item",
        "relative to the document's URI"
    );
    assert_eq!(s["Cat"]["allOf"][0]["$ref"], "#/components/schemas/Pet");
    assert_eq!(
        s["Cat"]["allOf"][1]["properties"]["nick"]["$ref"],
        "#/components/schemas/Pet/properties/name"
    );
    assert_eq!(
        s["Cat"]["allOf"][1]["properties"]["tag"]["$ref"],
        "#/components/schemas/Pet/$defs/Tag"
    );
    assert_eq!(
        s["Pet"]["properties"]["self"]["$ref"],
        "#/components/schemas/Pet"
    );
    assert_eq!(
        s["Pet"]["properties"]["tag"]["$ref"], "#/components/schemas/Pet/$defs/Tag",
        "`#/...` inside an `$id` is the resource's"
    );
    assert_eq!(
        s["Pet"]["properties"]["other"]["$ref"], "#/components/schemas/Item",
        "unless the resource has no such place: then the document's"
    );
    assert_eq!(
        s["Item"]["properties"]["sub"]["$ref"],
        "#/components/schemas/Sub"
    );
    assert!(
        s["Pet"].get("$id").is_none() && s["Pet"]["properties"]["name"].get("$anchor").is_none()
    );
    assert_eq!(
        s["Sub"]["examples"][0]["$id"], "not-an-id",
        "examples are data"
    );
}

#[test]
fn ids_in_other_files_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    // The root names a schema by the `$id` it has in a file it also references by path:
    // nothing is fetched.
    let spec = load_str(
        dir.path(),
        &[
            (
                "api.yaml",
                "openapi: 3.1.0\ncomponents:\n  schemas:\n    A: {$ref: 'https://example.com/b'}\n    All: {$ref: 'defs/common.yaml'}\n    D:\n      discriminator:\n        propertyName: k\n        mapping: {b: 'https://example.com/b', c: C}\n",
            ),
            (
                "defs/common.yaml",
                "B:\n  $id: https://example.com/b\n  type: string\n",
            ),
        ],
    )
    .unwrap();
    assert_eq!(
        spec.doc["components"]["schemas"]["A"]["$ref"],
        "#/x-turnpike-bundled/0/B"
    );
    assert_eq!(
        spec.doc["components"]["schemas"]["D"]["discriminator"]["mapping"],
        serde_json::json!({"b": "#/x-turnpike-bundled/0/B", "c": "C"})
    );
    assert!(spec.doc[BUNDLED][0]["B"].get("$id").is_none());
    let e = load_str(
        dir.path(),
        &[(
            "urn.yaml",
            "openapi: 3.1.0\ncomponents:\n  schemas:\n    A: {$ref: 'urn:example:nothing'}\n",
        )],
    )
    .unwrap_err();
    assert!(e.to_string().contains("components.schemas.A.$ref"), "{e}");
    assert!(e.message.contains("names no `$id`"), "{e}");
    let e = load_str(
        dir.path(),
        &[(
            "anchor.yaml",
            "openapi: 3.1.0\ncomponents:\n  schemas:\n    A: {$ref: '#nowhere'}\n",
        )],
    )
    .unwrap_err();
    assert!(e.message.contains("no `$anchor: nowhere`"), "{e}");
    // 3.0 has no `$id`: references resolve against the document, and the keyword goes.
    let spec = load_str(
        dir.path(),
        &[(
            "v30.yaml",
            "openapi: 3.0.3\ncomponents:\n  schemas:\n    A:\n      $id: https://example.com/a\n      properties: {b: {$ref: '#/components/schemas/B'}}\n    B: {type: string}\n",
        )],
    )
    .unwrap();
    let a = &spec.doc["components"]["schemas"]["A"];
    assert!(a.get("$id").is_none());
    assert_eq!(a["properties"]["b"]["$ref"], "#/components/schemas/B");
}
