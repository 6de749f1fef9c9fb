#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const HEAD: &str =
    r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">"#;

/// Writes `xsl` (a stylesheet body, wrapped in `xsl:stylesheet`) to `name` in `dir` and
/// compiles it.
fn sheet(dir: &Path, name: &str, xsl: &str) -> Result<Stylesheet, String> {
    let text = format!("{HEAD}{xsl}</xsl:stylesheet>");
    let path = dir.join(name);
    std::fs::write(&path, &text).unwrap();
    Stylesheet::compile(text.as_bytes(), &path)
}

fn text(out: &Output) -> String {
    String::from_utf8(out.body.clone()).unwrap()
}

#[test]
fn transforms_and_serializes_as_xsl_output_says() {
    let dir = tempfile::tempdir().unwrap();
    let s = sheet(
        dir.path(),
        "a.xsl",
        r#"<xsl:output method="xml" omit-xml-declaration="yes"/>
           <xsl:template match="/books"><titles count="{count(book)}"><xsl:copy-of select="book/title"/></titles></xsl:template>"#,
    )
    .unwrap();
    let out = s
        .transform(
            b"<books><book><title>A &amp; B</title></book><book><title>C</title></book></books>",
            &[],
        )
        .unwrap();
    assert_eq!(
        text(&out),
        "<titles count=\"2\"><title>A &amp; B</title><title>C</title></titles>\n"
    );
    let json = sheet(
        dir.path(),
        "b.xsl",
        r#"<xsl:output method="text"/>
           <xsl:template match="/a">{"a": "<xsl:value-of select="."/>"}</xsl:template>"#,
    )
    .unwrap();
    assert_eq!(
        text(&json.transform(b"<a>x</a>", &[]).unwrap()),
        r#"{"a": "x"}"#
    );
    // The default output method writes an XML declaration; CDATA is text.
    let copy = sheet(
        dir.path(),
        "c.xsl",
        r#"<xsl:template match="/"><r><xsl:value-of select="/a"/></r></xsl:template>"#,
    )
    .unwrap();
    assert_eq!(
        text(&copy.transform(b"<a><![CDATA[<x>]]>y</a>", &[]).unwrap()),
        "<?xml version=\"1.0\"?>\n<r>&lt;x&gt;y</r>\n"
    );
}

#[test]
fn parameters_are_strings() {
    let dir = tempfile::tempdir().unwrap();
    let s = sheet(
        dir.path(),
        "p.xsl",
        r#"<xsl:output method="text"/>
           <xsl:param name="library" select="'default'"/>
           <xsl:param name="expr"/>
           <xsl:param name="other" select="'kept'"/>
           <xsl:template match="/">[<xsl:value-of select="$library"/>|<xsl:value-of select="$expr"/>|<xsl:value-of select="$other"/>]</xsl:template>"#,
    )
    .unwrap();
    let out = s
        .transform(
            b"<a/>",
            &[
                ("library", r#"it's "predic8""#),
                ("expr", "1 + 1"),
                ("undeclared", "x"),
                ("not a name", "y"),
                ("library", "second"),
                ("nul", "a\0b"),
            ],
        )
        .unwrap();
    assert_eq!(text(&out), r#"[it's "predic8"|1 + 1|kept]"#);
    // Without parameters the defaults hold.
    assert_eq!(text(&s.transform(b"<a/>", &[]).unwrap()), "[default||kept]");
}

#[test]
fn input_that_is_not_xml_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = sheet(
        dir.path(),
        "a.xsl",
        r#"<xsl:template match="/"><r/></xsl:template>"#,
    )
    .unwrap();
    for bad in [
        &b"not xml"[..],
        b"<a><b></a>",
        b"<a/><b/>",
        b"",
        b"<a/>trailing",
    ] {
        match s.transform(bad, &[]) {
            Err(Error::NotXml(m)) => assert!(!m.is_empty(), "{bad:?}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let Err(Error::NotXml(m)) = s.transform(b"<a>\n<b></a>", &[]) else {
        panic!()
    };
    assert!(m.starts_with("line 2: "), "{m}");
    // A DTD is refused, so no entity is expanded.
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "s3cret").unwrap();
    let doc = format!(
        r#"<!DOCTYPE a [<!ENTITY e SYSTEM "{}"><!ENTITY i "inner">]><a>&e;&i;</a>"#,
        secret.display()
    );
    assert_eq!(
        s.transform(doc.as_bytes(), &[]),
        Err(Error::NotXml(
            "the document has a document type declaration".into()
        ))
    );
}

#[test]
fn a_stylesheet_that_does_not_compile_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let e = sheet(
        dir.path(),
        "bad.xsl",
        "\n<xsl:template match=\"/\">\n<xsl:value-of select=\"foo[\"/></xsl:template>",
    )
    .unwrap_err();
    let file = dir.path().join("bad.xsl");
    assert!(
        e.contains(&format!("file {} line 3", file.display())),
        "{e}"
    );
    assert!(
        e.contains("could not compile select expression 'foo['"),
        "{e}"
    );
    // Not well-formed.
    let e = sheet(dir.path(), "broken.xsl", "\n<xsl:template match=\"/\">").unwrap_err();
    assert!(e.starts_with("line 2: "), "{e}");
    // Well-formed, but not a stylesheet.
    let path = dir.path().join("plain.xml");
    let e = Stylesheet::compile(b"<root/>", &path).unwrap_err();
    assert!(e.contains("not a stylesheet"), "{e}");
    // An instruction without its required attribute.
    let e = sheet(
        dir.path(),
        "u.xsl",
        r#"<xsl:template match="/"><xsl:value-of/></xsl:template>"#,
    )
    .unwrap_err();
    assert!(e.contains("select"), "{e}");
}

#[test]
fn messages_and_termination() {
    let dir = tempfile::tempdir().unwrap();
    let s = sheet(
        dir.path(),
        "m.xsl",
        r#"<xsl:template match="/a"><r><xsl:message>seen <xsl:value-of select="."/></xsl:message></r></xsl:template>
           <xsl:template match="/stop"><xsl:message terminate="yes">bad input</xsl:message></xsl:template>"#,
    )
    .unwrap();
    let out = s.transform(b"<a>x</a>", &[]).unwrap();
    assert_eq!(out.messages, ["seen x"]);
    match s.transform(b"<stop/>", &[]) {
        Err(Error::Failed(m)) => assert!(m.contains("bad input"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A run-time error: an undeclared variable, with libxml2's and libxslt's words.
    let v = sheet(
        dir.path(),
        "v.xsl",
        r#"<xsl:template match="/"><r><xsl:value-of select="$nope"/></r></xsl:template>"#,
    );
    let m = match v {
        Err(m) => m,
        Ok(v) => match v.transform(b"<a/>", &[]) {
            Err(Error::Failed(m)) => m,
            other => panic!("{other:?}"),
        },
    };
    assert!(m.contains("nope"), "{m}");
    // The messages of one call do not leak into the next.
    assert_eq!(s.transform(b"<a>y</a>", &[]).unwrap().messages, ["seen y"]);
}

#[test]
fn document_reads_only_the_stylesheet_folder() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("sheets");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/codes.xml"), "<codes><c>DE</c></codes>").unwrap();
    std::fs::write(outer.path().join("secret.xml"), "<s>s3cret</s>").unwrap();
    let s = sheet(
        &dir,
        "d.xsl",
        r#"<xsl:output method="text"/>
           <xsl:template match="/a">[<xsl:value-of select="document(string(.))"/>]</xsl:template>"#,
    )
    .unwrap();
    let read = |href: &str| s.transform(format!("<a>{href}</a>").as_bytes(), &[]);
    // In the folder (relative to the stylesheet, or absolute).
    assert_eq!(text(&read("data/codes.xml").unwrap()), "[DE]");
    let abs = dir.join("data/codes.xml").display().to_string();
    assert_eq!(text(&read(&abs).unwrap()), "[DE]");
    // Outside it: refused, however written.
    for href in [
        "../secret.xml".to_owned(),
        "data/../../secret.xml".to_owned(),
        outer.path().join("secret.xml").display().to_string(),
        format!("file://{}", outer.path().join("secret.xml").display()),
        "/etc/passwd".to_owned(),
        "data/missing.xml".to_owned(),
    ] {
        match read(&href) {
            Err(Error::Failed(m)) => assert!(!m.contains("s3cret"), "{href}: {m}"),
            other => panic!("{href}: {other:?}"),
        }
    }
    // A symbolic link in the folder that leads out of it.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outer.path().join("secret.xml"), dir.join("link.xml")).unwrap();
        assert!(matches!(read("link.xml"), Err(Error::Failed(_))));
    }
    // The network.
    for href in ["http://127.0.0.1:9/x.xml", "ftp://127.0.0.1:9/x.xml"] {
        match read(href) {
            Err(Error::Failed(m)) => assert!(m.contains("refused"), "{href}: {m}"),
            other => panic!("{href}: {other:?}"),
        }
    }
}

#[test]
fn documents_read_are_parsed_without_entities() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "s3cret").unwrap();
    std::fs::write(
        dir.path().join("e.xml"),
        format!(
            r#"<!DOCTYPE d [<!ENTITY e SYSTEM "{}">]><d>[&e;]</d>"#,
            dir.path().join("secret.txt").display()
        ),
    )
    .unwrap();
    let s = sheet(
        dir.path(),
        "d.xsl",
        r#"<xsl:output method="text"/>
           <xsl:template match="/">[<xsl:value-of select="document('e.xml')"/>]</xsl:template>"#,
    )
    .unwrap();
    let out = s.transform(b"<a/>", &[]).unwrap();
    assert!(!text(&out).contains("s3cret"), "{}", text(&out));
}

#[test]
fn writing_files_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("written.xml");
    let s = Stylesheet::compile(
        format!(
            r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
                 xmlns:exsl="http://exslt.org/common" extension-element-prefixes="exsl">
               <xsl:template match="/"><r><exsl:document href="{}"><x/></exsl:document></r></xsl:template>
               </xsl:stylesheet>"#,
            target.display()
        )
        .as_bytes(),
        &dir.path().join("w.xsl"),
    )
    .unwrap();
    assert!(matches!(s.transform(b"<a/>", &[]), Err(Error::Failed(_))));
    assert!(!target.exists());
}

#[test]
fn imports_may_be_anywhere_local_and_are_listed() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("sheets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        outer.path().join("common.xsl"),
        format!(r#"{HEAD}<xsl:template name="hello">hello</xsl:template></xsl:stylesheet>"#),
    )
    .unwrap();
    let s = sheet(
        &dir,
        "main.xsl",
        r#"<xsl:import href="../common.xsl"/><xsl:output method="text"/>
           <xsl:template match="/"><xsl:call-template name="hello"/></xsl:template>"#,
    )
    .unwrap();
    assert_eq!(text(&s.transform(b"<a/>", &[]).unwrap()), "hello");
    assert_eq!(
        s.files(),
        [std::fs::canonicalize(outer.path().join("common.xsl")).unwrap()]
    );
    // An import over the network is refused.
    let e = sheet(
        &dir,
        "net.xsl",
        r#"<xsl:import href="http://127.0.0.1:9/x.xsl"/><xsl:template match="/"/>"#,
    )
    .unwrap_err();
    assert!(e.contains("refused"), "{e}");
}

#[test]
fn deep_recursion_fails_instead_of_overflowing_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.xsl");
    let text = format!(
        r#"{HEAD}<xsl:output method="text"/>
           <xsl:template name="down"><xsl:param name="n"/><xsl:if test="$n &gt; 0"><xsl:call-template name="down"><xsl:with-param name="n" select="$n - 1"/></xsl:call-template></xsl:if><xsl:if test="$n = 0">bottom</xsl:if></xsl:template>
           <xsl:template match="/a"><xsl:call-template name="down"><xsl:with-param name="n" select="number(.)"/></xsl:call-template></xsl:template>
           </xsl:stylesheet>"#
    );
    // A thread with the default stack (2 MiB), as the gateway's workers have.
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let s = Stylesheet::compile(text.as_bytes(), &path).unwrap();
            assert_eq!(
                super::tests::text(&s.transform(b"<a>500</a>", &[]).unwrap()),
                "bottom"
            );
            match s.transform(b"<a>100000</a>", &[]) {
                Err(Error::Failed(m)) => assert!(m.contains("recursion"), "{m}"),
                other => panic!("{other:?}"),
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn each_thread_compiles_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.xsl");
    let text = format!(
        r#"{HEAD}<xsl:output method="text"/><xsl:param name="p"/><xsl:template match="/a"><xsl:value-of select="concat(., $p)"/></xsl:template></xsl:stylesheet>"#
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (text, path) = (text.clone(), path.clone());
            std::thread::spawn(move || {
                let s = Stylesheet::compile(text.as_bytes(), &path).unwrap();
                for i in 0..200 {
                    let p = format!("{t}-{i}");
                    let out = s.transform(b"<a>x</a>", &[("p", &p)]).unwrap();
                    assert_eq!(String::from_utf8(out.body).unwrap(), format!("x{p}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn names() {
    for ok in ["a", "library", "request-id", "_x", "a.b", "größe", "x1"] {
        assert!(is_ncname(ok), "{ok}");
    }
    for bad in ["", "1a", "-a", "a b", "a:b", ".a", "a/b"] {
        assert!(!is_ncname(bad), "{bad}");
    }
}
