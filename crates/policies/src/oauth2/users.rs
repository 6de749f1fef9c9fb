//! The users and clients of an authorization server, compiled from `staticUserDataProvider` and
//! `staticClientList`: passwords and client secrets are checked with the gateway's password
//! verification (plain text in constant time, or hashes).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use turnpike_core::CompileError;

use super::settings::{StaticClient, StaticUser};
use crate::auth::password::PasswordCheck;
use crate::err;

/// The grants a client may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrantType {
    /// `client_credentials`.
    ClientCredentials,
    /// `password`.
    Password,
    /// `refresh_token`.
    RefreshToken,
}

impl GrantType {
    /// Every grant the server implements.
    pub(crate) const ALL: [GrantType; 3] = [
        GrantType::ClientCredentials,
        GrantType::Password,
        GrantType::RefreshToken,
    ];

    /// The grant's `grant_type` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            GrantType::ClientCredentials => "client_credentials",
            GrantType::Password => "password",
            GrantType::RefreshToken => "refresh_token",
        }
    }

    /// The grant named `name`, if the server implements it.
    pub(crate) fn parse(name: &str) -> Option<GrantType> {
        GrantType::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// A user of the password grant.
pub(crate) struct User {
    pub name: Arc<str>,
    password: PasswordCheck,
    /// The user's attributes besides `username` and `password` (`scopes`, `aud`, `email`…).
    pub attributes: BTreeMap<String, String>,
    /// `scopes`: the scopes the user may be granted (`None`: not limited by the user).
    pub scopes: Option<Vec<String>>,
    /// `aud`: audiences of the user's tokens.
    pub audience: Vec<String>,
}

/// A client.
pub(crate) struct Client {
    pub id: Arc<str>,
    secret: PasswordCheck,
    pub grants: Vec<GrantType>,
    /// The audiences the client may ask for (empty: none).
    pub resources: Vec<String>,
    /// The scopes the client may ask for (`None`: not limited by the client).
    pub scopes: Option<Vec<String>>,
}

// What a user or client is, without its password or secret.
impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.id)
            .field("grants", &self.grants)
            .field("resources", &self.resources)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Claims a user attribute must not set: the server sets them itself.
const RESERVED: [&str; 8] = [
    "sub", "iss", "exp", "iat", "nbf", "jti", "clientId", "scope",
];

/// Splits a list written with blanks or commas.
pub(crate) fn words(s: &str) -> Vec<String> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A check that never matches, run for unknown users and clients so that answering about them
/// costs about as much as about known ones.
fn decoy() -> &'static PasswordCheck {
    static DECOY: OnceLock<Option<PasswordCheck>> = OnceLock::new();
    static FALLBACK: PasswordCheck = PasswordCheck::Plain([0; 32]);
    DECOY
        .get_or_init(|| {
            let mut r = [0u8; 32];
            getrandom::fill(&mut r).ok()?;
            Some(PasswordCheck::Plain(r))
        })
        .as_ref()
        .unwrap_or(&FALLBACK)
}

/// The users, by name.
#[derive(Debug, Default)]
pub(crate) struct Users(HashMap<String, Arc<User>>);

impl Users {
    /// Runs at load: compiles `staticUserDataProvider.users`; a user listed twice, an
    /// unsupported password hash or an attribute naming a claim the server sets is an error.
    pub(crate) fn compile(list: &[StaticUser]) -> Result<Users, CompileError> {
        let mut users = HashMap::new();
        for (i, u) in list.iter().enumerate() {
            let at = |k: &str| format!("staticUserDataProvider.users[{i}].{k}");
            let name = u.username.text();
            if name.is_empty() {
                return Err(err(&at("username"), "must not be empty"));
            }
            let password =
                PasswordCheck::new(&u.password.text()).map_err(|m| err(&at("password"), m))?;
            let mut attributes = BTreeMap::new();
            for (k, v) in &u.attributes {
                if RESERVED.contains(&k.as_str()) {
                    return Err(err(
                        &at(k),
                        format!("`{k}` is a claim the server sets itself"),
                    ));
                }
                attributes.insert(k.clone(), v.text());
            }
            let scopes = attributes.get("scopes").map(|s| words(s));
            let audience = attributes.get("aud").map(|s| words(s)).unwrap_or_default();
            let user = User {
                name: name.as_str().into(),
                password,
                attributes,
                scopes,
                audience,
            };
            if users.insert(name.clone(), Arc::new(user)).is_some() {
                return Err(err(
                    &at("username"),
                    format!("user `{name}` is listed twice"),
                ));
            }
        }
        Ok(Users(users))
    }

    /// Runs per password grant: the user when `password` is theirs.
    pub(crate) fn verify(&self, name: &str, password: &str) -> Option<Arc<User>> {
        match self.0.get(name) {
            Some(u) if u.password.verify(password) => Some(u.clone()),
            Some(_) => None,
            None => {
                decoy().verify(password);
                None
            }
        }
    }

    /// The user named `name`, for tokens issued to them.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.0.get(name)
    }

    /// True when no user is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The clients, by id.
#[derive(Debug, Default)]
pub(crate) struct Clients(HashMap<String, Arc<Client>>);

impl Clients {
    /// Runs at load: compiles `staticClientList.clients`. A client listed twice, an unknown
    /// grant type, or a grant of the authorization code or implicit flow is an error.
    pub(crate) fn compile(
        list: &[StaticClient],
        have_users: bool,
    ) -> Result<Clients, CompileError> {
        let mut clients = HashMap::new();
        for (i, c) in list.iter().enumerate() {
            let at = |k: &str| format!("staticClientList.clients[{i}].{k}");
            let id = c.client_id.text();
            if id.is_empty() {
                return Err(err(&at("clientId"), "must not be empty"));
            }
            let secret = PasswordCheck::new(&c.client_secret.text())
                .map_err(|m| err(&at("clientSecret"), m))?;
            let grants = match &c.grant_types {
                None => GrantType::ALL.to_vec(),
                Some(list) => {
                    let mut grants = Vec::new();
                    for name in words(list) {
                        let g = GrantType::parse(&name).ok_or_else(|| match name.as_str() {
                            "authorization_code" | "implicit" | "code" | "token" => err(
                                &at("grantTypes"),
                                format!("`{name}` needs the login dialog of the authorization code and implicit flows, which Turnpike does not implement (client_credentials, password and refresh_token are)"),
                            ),
                            _ => err(
                                &at("grantTypes"),
                                format!("unknown grant type `{name}` (client_credentials, password, refresh_token)"),
                            ),
                        })?;
                        if g == GrantType::Password && !have_users {
                            return Err(err(
                                &at("grantTypes"),
                                "the password grant needs users: add a `staticUserDataProvider`",
                            ));
                        }
                        if !grants.contains(&g) {
                            grants.push(g);
                        }
                    }
                    grants
                }
            };
            if let Some(url) = &c.callback_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(err(&at("callbackUrl"), "must be an http(s) URL"));
                }
            }
            let client = Client {
                id: id.as_str().into(),
                secret,
                grants,
                resources: c.resources.as_deref().map(words).unwrap_or_default(),
                scopes: c.scopes.as_deref().map(words),
            };
            if clients.insert(id.clone(), Arc::new(client)).is_some() {
                return Err(err(
                    &at("clientId"),
                    format!("client `{id}` is listed twice"),
                ));
            }
        }
        if clients.is_empty() {
            return Err(err(
                "staticClientList.clients",
                "at least one client is needed",
            ));
        }
        Ok(Clients(clients))
    }

    /// Runs per client authentication: the client when `secret` is its secret.
    pub(crate) fn verify(&self, id: &str, secret: &str) -> Option<Arc<Client>> {
        match self.0.get(id) {
            Some(c) if c.secret.verify(secret) => Some(c.clone()),
            Some(_) => None,
            None => {
                decoy().verify(secret);
                None
            }
        }
    }

    /// True when a client of this id is configured (tokens of removed clients are refused).
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    /// Every grant some client may use, in the server's order.
    pub(crate) fn grant_types(&self) -> Vec<&'static str> {
        GrantType::ALL
            .into_iter()
            .filter(|g| self.0.values().any(|c| c.grants.contains(g)))
            .map(GrantType::name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth2::settings::Scalar;

    fn client(grants: Option<&str>) -> StaticClient {
        StaticClient {
            client_id: Scalar::Text("abc".into()),
            client_secret: Scalar::Text("def".into()),
            callback_url: None,
            grant_types: grants.map(str::to_owned),
            resources: Some("order-api  shop".into()),
            scopes: None,
        }
    }

    #[test]
    fn clients_and_their_grants() {
        let c = Clients::compile(&[client(Some("password, refresh_token"))], true).unwrap();
        let abc = c.verify("abc", "def").unwrap();
        assert_eq!(abc.grants, [GrantType::Password, GrantType::RefreshToken]);
        assert_eq!(abc.resources, ["order-api", "shop"]);
        assert!(c.verify("abc", "deF").is_none());
        assert!(c.verify("nobody", "def").is_none());
        assert_eq!(c.grant_types(), ["password", "refresh_token"]);
        let all = Clients::compile(&[client(None)], false).unwrap();
        assert_eq!(all.grant_types().len(), 3);
        for (grants, users, expect) in [
            ("authorization_code", true, "login dialog"),
            ("implicit", true, "login dialog"),
            ("device_code", true, "unknown grant type"),
            ("password", false, "needs users"),
        ] {
            let e = Clients::compile(&[client(Some(grants))], users).unwrap_err();
            assert!(e.message.contains(expect), "{grants}: {e}");
            assert_eq!(e.key, "staticClientList.clients[0].grantTypes");
        }
        let e = Clients::compile(&[client(None), client(None)], true).unwrap_err();
        assert!(e.message.contains("twice"));
        assert!(Clients::compile(&[], true).is_err());
    }

    #[test]
    fn users_and_their_attributes() {
        let users: Vec<StaticUser> = serde_json::from_value(serde_json::json!([
            {"username": "john", "password": "password", "aud": "order-api", "scopes": "read write", "email": "j@x"},
            {"username": "ada", "password": pwhash::bcrypt::hash("pw").unwrap()}
        ]))
        .unwrap();
        let u = Users::compile(&users).unwrap();
        let john = u.verify("john", "password").unwrap();
        assert_eq!(
            john.scopes.as_deref(),
            Some(&["read".to_owned(), "write".to_owned()][..])
        );
        assert_eq!(john.audience, ["order-api"]);
        assert_eq!(john.attributes["email"], "j@x");
        assert!(u.verify("john", "Password").is_none());
        assert!(u.verify("ada", "pw").is_some());
        assert!(u.verify("eve", "pw").is_none());
        let bad: Vec<StaticUser> = serde_json::from_value(serde_json::json!([
            {"username": "x", "password": "y", "sub": "admin"}
        ]))
        .unwrap();
        let e = Users::compile(&bad).unwrap_err();
        assert!(e.message.contains("sets itself"), "{e}");
    }
}
