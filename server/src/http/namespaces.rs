//! Namespaces over HTTP: the endpoints that list, show, make and forget them, and the
//! layer that reads the namespace a request names (`?namespace=NS`, as Nomad's API takes
//! it; none: `default`) before the request is routed. A volume of a namespace other than
//! `default` is keyed `NS~NAME` inside csivol (`api::volume_key`); the layer turns the
//! volume the path names, and a `volume=` of the query, into that key, so that every
//! handler below and the authorisation layer see the volume's key, and no client ever
//! puts a key in a URL.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, ALL_NAMESPACES, DEFAULT_NAMESPACE, KEY_SEPARATOR};

use super::once::{Answer, Once, RouteNamespace, created_or_ok};
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;
use crate::store::sqlite::writer::WriteCtx;

/// The namespace a request names, as the layer read it (a request extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Asked {
    /// One namespace (`default` when none is named); `None`: every namespace (`*`).
    pub namespace: Option<String>,
    /// What the route does with it.
    pub holds: Holds,
}

impl Asked {
    /// The one namespace the request names, where the route reads it.
    pub(crate) fn named(&self) -> Option<&str> {
        match self.holds {
            Holds::Cluster => None,
            _ => self.namespace.as_deref(),
        }
    }

    /// The one namespace asked for, refusing `*`.
    pub(crate) fn one(&self) -> ApiResult<&str> {
        self.namespace.as_deref().ok_or_else(|| {
            ApiError::bad_request("`namespace=*` (every namespace) is for listings only")
                .with_hint("name the volume's namespace: `?namespace=NS` (`csivol -n NS`)")
        })
    }
}

/// What a route does with a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// `/v1/volumes/{name}...`, `/v1/snapshots/{name}...`, `/v1/group-snapshots/{name}`,
    /// `/v1/pools/{name}...`: the volume, snapshot, group or pool named is the namespace's.
    Named,
    /// A listing of volumes, claims or pools, or the event log: of the namespace (or every
    /// one).
    Listing,
    /// `/v1/fresh-claims`: makes a volume in the one namespace the request names.
    Makes,
    /// Cluster-wide (nodes, plugins, tokens, namespaces themselves): the namespace is not
    /// read.
    Cluster,
}

fn holds(path: &str) -> Holds {
    let mut parts = path.trim_start_matches('/').split('/');
    let (_, resource, name, verb) = (parts.next(), parts.next(), parts.next(), parts.next());
    match (resource, name, verb) {
        (Some("volumes" | "group-snapshots" | "snapshots" | "pools"), Some(_), _) => Holds::Named,
        (
            Some("volumes" | "claims" | "events" | "snapshots" | "group-snapshots" | "pools"),
            None,
            _,
        ) => Holds::Listing,
        (Some("fresh-claims"), _, _) => Holds::Makes,
        _ => Holds::Cluster,
    }
}

/// The layer before routing: reads `namespace` from the query (taking it out), checks its
/// name, and puts the volume the path or the query names into its key.
pub(super) async fn qualify(req: Request, next: axum::middleware::Next) -> Response {
    match rewrite(req) {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn rewrite(mut req: Request) -> ApiResult<Request> {
    let uri = req.uri().clone();
    let holds = holds(uri.path());
    let raw = uri.query().unwrap_or("");
    let decoded = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let named: Vec<&String> = decoded
        .iter()
        .filter(|(k, _)| k == "namespace")
        .map(|(_, v)| v)
        .collect();
    let namespace = match named.as_slice() {
        [] => Some(DEFAULT_NAMESPACE.to_owned()),
        [one] if one.as_str() == ALL_NAMESPACES => None,
        [one] => {
            api::validate_namespace(one).map_err(|e| {
                ApiError::invalid(e)
                    .with_hint("name an existing namespace: `csivol namespace list`")
            })?;
            Some((*one).clone())
        }
        _ => {
            return Err(ApiError::bad_request("`namespace` is given more than once")
                .with_hint("name one namespace, or `*` for every namespace in a listing"));
        }
    };
    let asked = Asked { namespace, holds };
    let prefix = match &asked.namespace {
        Some(ns) if ns != DEFAULT_NAMESPACE && holds != Holds::Cluster => {
            format!("{ns}{KEY_SEPARATOR}")
        }
        _ => String::new(),
    };
    let mut path = uri.path().to_owned();
    if holds == Holds::Makes {
        let ns = asked.one()?.to_owned();
        if ns != DEFAULT_NAMESPACE {
            req.extensions_mut().insert(RouteNamespace(ns));
        }
    }
    if holds == Holds::Named {
        asked.one()?;
        let mut segments: Vec<&str> = uri.path().split('/').collect();
        // "", "v1", "volumes", NAME, ...
        let name = segments.get(3).copied().unwrap_or("");
        if name.contains(KEY_SEPARATOR) || name.to_ascii_lowercase().contains("%7e") {
            return Err(ApiError::invalid(format!(
                "invalid name `{name}`: a name holds no `{KEY_SEPARATOR}`"
            ))
            .with_hint("name the namespace with `?namespace=NS` (`csivol -n NS`)"));
        }
        let key = format!("{prefix}{name}");
        if segments.len() > 3 {
            segments[3] = &key;
        }
        path = segments.join("/");
    }
    // The query as sent, less `namespace`, with a `volume=` qualified.
    let mut query = Vec::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split('=').next().unwrap_or("");
        let value = pair.split_once('=').map_or("", |(_, v)| v);
        // A name holds no separator: a `volume=` that does would name another namespace's
        // key from this one (`default` included), past the namespace the token holds.
        if matches!(key, "volume" | "group")
            && (value.contains(KEY_SEPARATOR) || value.to_ascii_lowercase().contains("%7e"))
        {
            return Err(ApiError::invalid(format!(
                "invalid {key} name `{value}`: a name holds no `{KEY_SEPARATOR}`"
            ))
            .with_hint("name the volume's namespace with `?namespace=NS` (`csivol -n NS`)"));
        }
        match key {
            "namespace" => {}
            "volume" | "group" if !prefix.is_empty() => {
                query.push(format!("{key}={prefix}{value}"));
            }
            _ => query.push(pair.to_owned()),
        }
    }
    let path_and_query = if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    };
    let mut parts = uri.into_parts();
    parts.path_and_query = Some(
        path_and_query
            .parse()
            .map_err(|e| ApiError::bad_request(format!("invalid request path: {e}")))?,
    );
    *req.uri_mut() = Uri::from_parts(parts)
        .map_err(|e| ApiError::bad_request(format!("invalid request path: {e}")))?;
    req.extensions_mut().insert(asked);
    Ok(req)
}

/// Refuses a request naming a namespace that does not exist, where the route holds things
/// of namespaces, and one naming a namespace other than `default` for what is kept there
/// only (after the caller's token was checked, so that a caller learns nothing of the
/// namespaces its token does not hold).
pub(super) async fn require_asked(app: &App, asked: Option<&Asked>) -> ApiResult<()> {
    let Some(asked) = asked else {
        return Ok(());
    };
    let ns = match (asked.holds, asked.namespace.as_deref()) {
        (Holds::Cluster, _) | (_, None | Some(DEFAULT_NAMESPACE)) => return Ok(()),
        (_, Some(ns)) => ns,
    };
    let ns = ns.to_owned();
    app.db
        .read_small(move |c| lifecycle::require_namespace(c, &ns))
        .await?;
    Ok(())
}

/// `GET /v1/namespaces`: every namespace with what it holds, `default` first; of a token
/// narrowed to namespaces, those.
pub(super) async fn list_namespaces(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<api::Namespace>>> {
    let scope = app.caller(&headers)?.scope;
    let mut all = app.db.read(lifecycle::namespace_views).await?;
    all.retain(|n| scope.covers_namespace(&n.name));
    Ok(Json(all))
}

/// `GET /v1/namespaces/{name}`.
pub(super) async fn get_namespace(
    State(app): State<App>,
    Path(ns): Path<String>,
) -> ApiResult<Json<api::Namespace>> {
    Ok(Json(
        app.db
            .read(move |c| lifecycle::namespace_view(c, &ns))
            .await?,
    ))
}

/// `PUT /v1/namespaces/{name}`: makes a namespace (201), or finds it made (200).
pub(super) async fn put_namespace(
    State(app): State<App>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    once: Once,
    super::extract::Body(spec): super::extract::Body<api::NamespaceSpec>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::create_namespace(ctx, &ns, &actor);
    once.respond(&app, &spec, write, created_or_ok).await
}

/// `DELETE /v1/namespaces/{name}`: forgets an empty namespace.
pub(super) async fn delete_namespace(
    State(app): State<App>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::delete_namespace(ctx, &ns, &actor);
    let gone = |_: &()| Answer::empty(StatusCode::NO_CONTENT);
    once.respond(&app, &(), write, gone).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(uri: &str) -> Result<(String, Asked), String> {
        let req = Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap();
        let req = rewrite(req).map_err(|e| e.message)?;
        let asked = req.extensions().get::<Asked>().cloned().unwrap();
        Ok((req.uri().to_string(), asked))
    }

    /// A per-job claim's path names no namespace: the one it asks for goes to the repeat
    /// key's route, so one key sent in two namespaces is two requests.
    #[test]
    fn a_per_job_claim_keeps_its_namespace_for_its_repeat_key() {
        let route_of = |uri: &str| {
            let req = Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap();
            rewrite(req)
                .unwrap()
                .extensions()
                .get::<RouteNamespace>()
                .map(|r| r.0.clone())
        };
        assert_eq!(
            route_of("/v1/fresh-claims?namespace=team-a").as_deref(),
            Some("team-a")
        );
        assert_eq!(route_of("/v1/fresh-claims"), None);
        assert_eq!(route_of("/v1/volumes/db/claims?namespace=team-a"), None);
    }

    #[test]
    fn the_namespace_becomes_the_volumes_key() {
        let asked = |ns: Option<&str>, holds| Asked {
            namespace: ns.map(str::to_owned),
            holds,
        };
        for (uri, want, holds, ns) in [
            (
                "/v1/volumes/db",
                "/v1/volumes/db",
                Holds::Named,
                Some("default"),
            ),
            (
                "/v1/volumes/db?namespace=team-a",
                "/v1/volumes/team-a~db",
                Holds::Named,
                Some("team-a"),
            ),
            (
                "/v1/volumes/db/claims/a1?namespace=team-a&wait=1s",
                "/v1/volumes/team-a~db/claims/a1?wait=1s",
                Holds::Named,
                Some("team-a"),
            ),
            (
                "/v1/claims?volume=db&namespace=team-a",
                "/v1/claims?volume=team-a~db",
                Holds::Listing,
                Some("team-a"),
            ),
            (
                "/v1/volumes?namespace=*",
                "/v1/volumes",
                Holds::Listing,
                None,
            ),
            (
                "/v1/snapshots?namespace=team-a&volume=db",
                "/v1/snapshots?volume=team-a~db",
                Holds::Listing,
                Some("team-a"),
            ),
            (
                "/v1/snapshots/s1?namespace=team-a",
                "/v1/snapshots/team-a~s1",
                Holds::Named,
                Some("team-a"),
            ),
            (
                "/v1/snapshots/s1/adopt?namespace=team-a",
                "/v1/snapshots/team-a~s1/adopt",
                Holds::Named,
                Some("team-a"),
            ),
            (
                "/v1/pools/cache/claims/a1?namespace=team-a",
                "/v1/pools/team-a~cache/claims/a1",
                Holds::Named,
                Some("team-a"),
            ),
            (
                "/v1/pools?namespace=team-a",
                "/v1/pools",
                Holds::Listing,
                Some("team-a"),
            ),
            (
                "/v1/nodes?namespace=team-a",
                "/v1/nodes",
                Holds::Cluster,
                Some("team-a"),
            ),
            (
                "/v1/fresh-claims?namespace=team-a",
                "/v1/fresh-claims",
                Holds::Makes,
                Some("team-a"),
            ),
        ] {
            assert_eq!(
                rewritten(uri),
                Ok((want.to_owned(), asked(ns, holds))),
                "{uri}"
            );
        }
        for (uri, says) in [
            ("/v1/volumes/team-a~db", "holds no `~`"),
            ("/v1/events?volume=team-b~db", "holds no `~`"),
            ("/v1/claims?volume=team-b%7Edb", "holds no `~`"),
            ("/v1/events?volume=x~db&namespace=team-a", "holds no `~`"),
            ("/v1/volumes/db?namespace=*", "for listings only"),
            ("/v1/fresh-claims?namespace=*", "for listings only"),
            ("/v1/volumes/db?namespace=Bad/ns", "invalid namespace name"),
            ("/v1/volumes?namespace=a&namespace=b", "more than once"),
        ] {
            let e = rewritten(uri).unwrap_err();
            assert!(e.contains(says), "{uri}: {e}");
        }
    }
}
