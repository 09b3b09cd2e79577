//! Istio's published samples and istio.io task YAML (unchanged, tests/fixtures/istio/NOTICE.md),
//! loaded alone and with their cluster, behave as in Istio: a reference nothing defines is a
//! coded warning (the route is listed as dangling), a re-applied document replaces the earlier
//! one, and kinds warden does not implement are refused unless skipped.

use std::path::PathBuf;
use warden_config::{
    load_paths, load_paths_with, Code, DanglingReason, DestinationSlot, LoadOptions, Problem,
    RouteSection,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/istio")
        .join(name)
}

fn codes(warnings: &[Problem]) -> Vec<(&'static str, String, String)> {
    warnings
        .iter()
        .filter_map(|w| {
            let code = w.code?;
            Some((code.id(), w.location.field.clone(), w.message.clone()))
        })
        .collect()
}

#[test]
fn bookinfo_gateway_alone_loads_with_istios_warning_and_a_dangling_route() {
    let path = fixture("samples-bookinfo-gateway.yaml");
    let loaded = load_paths(std::slice::from_ref(&path)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        codes(&loaded.warnings),
        [(
            "IST0101",
            "spec.http[0].route[0].destination.host".to_owned(),
            "Referenced host not found: \"productpage\"".to_owned()
        )]
    );
    let w = &loaded.warnings[0];
    assert_eq!(w.location.line, Some(41), "{w}");
    assert!(w.to_string().ends_with("[IST0101]"), "{w}");
    let set = &loaded.set;
    assert_eq!(set.dangling.len(), 1);
    let d = &set.dangling[0];
    assert_eq!(
        (d.section, d.route, d.slot, d.host.as_str(), &d.reason),
        (
            RouteSection::Http,
            0,
            DestinationSlot::Route(0),
            "productpage",
            &DanglingReason::Host
        )
    );
    let vs = &set.virtual_services[0];
    let field = "spec.http[0].route[0].destination";
    assert_eq!(set.dangling_destination(vs, field), Some(d));
    assert_eq!(set.dangling_of(vs).count(), 1);
    assert_eq!(
        set.dangling_destination(vs, "spec.http[1].route[0].destination"),
        None
    );
}

#[test]
fn bookinfo_with_its_cluster_loads_without_reference_warnings() {
    let paths = [
        fixture("samples-bookinfo-platform.yaml"),
        fixture("samples-bookinfo-gateway.yaml"),
        fixture("samples-bookinfo-destination-rule-all.yaml"),
        fixture("samples-bookinfo-virtual-service-all-v1.yaml"),
    ];
    let loaded = load_paths(&paths).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.set.dangling.is_empty(), "{:#?}", loaded.set.dangling);
    // Deployments and ServiceAccounts cannot change what a request gets: one warning per kind.
    let codes: Vec<_> = loaded.warnings.iter().map(|w| w.code).collect();
    assert_eq!(
        codes,
        [Some(Code::KindIgnored), Some(Code::KindIgnored)],
        "{:#?}",
        loaded.warnings
    );
    assert_eq!(loaded.set.services.len(), 4);
    assert_eq!(loaded.set.virtual_services.len(), 5);
}

#[test]
fn the_route_rules_alone_warn_for_every_host_and_subset_they_name() {
    // Rules applied before the services exist (the task's order is the other way round).
    let paths = [
        fixture("samples-bookinfo-virtual-service-all-v1.yaml"),
        fixture("samples-bookinfo-destination-rule-all.yaml"),
    ];
    let loaded = load_paths(&paths).unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<&str> = loaded
        .set
        .dangling
        .iter()
        .map(|d| d.host.as_str())
        .collect();
    assert_eq!(hosts, ["productpage", "reviews", "ratings", "details"]);
    assert!(loaded
        .set
        .dangling
        .iter()
        .all(|d| d.reason == DanglingReason::Host));

    // With the services but without the rules' subsets: IST0101 for host+subset.
    let paths = [
        fixture("samples-bookinfo-platform.yaml"),
        fixture("samples-bookinfo-virtual-service-all-v1.yaml"),
    ];
    let loaded = load_paths(&paths).unwrap_or_else(|e| panic!("{e}"));
    let subsets: Vec<String> = codes(&loaded.warnings)
        .into_iter()
        .filter(|(c, _, _)| *c == "IST0101")
        .map(|(_, _, m)| m)
        .collect();
    assert_eq!(
        subsets,
        [
            "Referenced host+subset in destinationrule not found: \"productpage+v1\"",
            "Referenced host+subset in destinationrule not found: \"reviews+v1\"",
            "Referenced host+subset in destinationrule not found: \"ratings+v1\"",
            "Referenced host+subset in destinationrule not found: \"details+v1\"",
        ]
    );
    assert_eq!(loaded.set.dangling.len(), 4);
}

#[test]
fn the_rate_limit_task_reapplies_virtual_service_bookinfo_and_the_later_file_wins() {
    let first = fixture("samples-bookinfo-gateway.yaml");
    let second = fixture("istio-io-advanced-virtualservice.yaml");
    let paths = [
        fixture("samples-bookinfo-platform.yaml"),
        first.clone(),
        second.clone(),
    ];
    let loaded = load_paths(&paths).unwrap_or_else(|e| panic!("{e}"));
    let vs: Vec<_> = loaded
        .set
        .virtual_services
        .iter()
        .filter(|v| v.metadata.name == "bookinfo")
        .collect();
    assert_eq!(vs.len(), 1);
    assert_eq!(vs[0].file, second);
    assert_eq!(
        vs[0].spec.http.len(),
        2,
        "the task's version has the `api` route"
    );
    let replaced: Vec<&Problem> = loaded
        .warnings
        .iter()
        .filter(|w| w.code == Some(Code::DocumentReplaced))
        .collect();
    assert_eq!(replaced.len(), 1, "{:#?}", loaded.warnings);
    let w = replaced[0];
    assert_eq!(w.location.file, second);
    assert_eq!(w.location.line, Some(4));
    assert_eq!(
        w.message,
        format!(
            "VirtualService default/bookinfo replaces the one at {}:18 (document 2), as \
             `kubectl apply` of the files in order would",
            first.display()
        )
    );
}

#[test]
fn gateway_api_samples_load_as_the_istio_routes_they_stand_for() {
    let path = fixture("samples-bookinfo-gateway-api-bookinfo-gateway.yaml");
    let loaded = load_paths(std::slice::from_ref(&path)).unwrap_or_else(|e| panic!("{e}"));
    let set = &loaded.set;
    assert_eq!(set.gateway_api.gateways.len(), 1);
    assert_eq!(set.gateway_api.http_routes.len(), 1);
    // One Istio Gateway, and one VirtualService for the listener's only hostname (`*`),
    // its routes in the Gateway API's precedence: exact paths first, then the longest prefix.
    assert_eq!(set.gateways.len(), 1);
    assert_eq!(
        set.gateways[0].metadata.name,
        "bookinfo-gateway-istio-autogenerated-k8s-gateway"
    );
    let vs = &set.virtual_services[0].spec;
    let paths: Vec<String> = vs
        .http
        .iter()
        .map(|r| {
            r.matches
                .iter()
                .map(|m| {
                    let u = m.uri.as_ref().unwrap();
                    u.exact
                        .clone()
                        .unwrap_or_else(|| format!("{}*", u.prefix.clone().unwrap()))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/productpage",
            "/logout",
            "/login",
            "/api/v1/products /api/v1/products/*",
            "/static /static/*"
        ]
    );
    // The sample's productpage Service is not in this file: the route is attached, its
    // backend unresolved (500 for its requests, as the spec says), and a located warning.
    let text = set.gateway_api.describe_status();
    assert!(
        text.contains("ResolvedRefs=False (BackendNotFound: backendRef productpage.default.svc.cluster.local port 9080"),
        "{text}"
    );
    assert!(
        text.contains("parent default/bookinfo-gateway: Accepted=True (Accepted)"),
        "{text}"
    );
    let w = &loaded.warnings[0];
    assert_eq!(
        (w.location.line, w.location.field.as_str()),
        (Some(23), "spec.rules")
    );

    // Skipped on request: loaded, with one warning per kind at every load.
    let options = LoadOptions {
        skip_kinds: vec![
            "Gateway.gateway.networking.k8s.io".into(),
            "HTTPRoute".into(),
        ],
    };
    for _ in 0..2 {
        let loaded = load_paths_with(std::slice::from_ref(&path), &options)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(loaded.set.gateways.is_empty());
        assert!(loaded.set.virtual_services.is_empty());
        let skipped: Vec<String> = loaded
            .warnings
            .iter()
            .filter(|w| w.code == Some(Code::KindSkipped))
            .map(|w| w.message.clone())
            .collect();
        assert_eq!(skipped.len(), 2, "{:#?}", loaded.warnings);
        assert!(
            skipped[0].starts_with(
                "kind Gateway (gateway.networking.k8s.io/v1) skipped as --skip-kind asks \
                 (1 document, this is the first); requests do not get what it would do: the \
                 operator skips it"
            ),
            "{skipped:?}"
        );
    }
}

#[test]
fn telemetry_access_logging_and_tracing_are_read() {
    // Access logging cannot change what a request gets: read, and an OpenTelemetry provider
    // warden does not have is one warning at its name.
    let loki = fixture("samples-open-telemetry-loki-telemetry.yaml");
    let loaded = load_paths(std::slice::from_ref(&loki)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings.len(), 1, "{:#?}", loaded.warnings);
    assert_eq!(loaded.warnings[0].code, Some(Code::FieldNotSupported));
    assert_eq!(
        loaded.warnings[0].location.field,
        "spec.accessLogging[0].providers[0].name"
    );
    assert_eq!(loaded.set.telemetry_access_logging.len(), 1);

    // Istio's OpenTelemetry sample: its tracing is read.
    let tracing = fixture("samples-open-telemetry-tracing-telemetry.yaml");
    let loaded = load_paths(std::slice::from_ref(&tracing)).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    let t = &loaded.set.telemetry_tracing[0].spec.tracing;
    assert_eq!(t.providers, ["otel-tracing"]);
    assert_eq!(t.random_sampling_percentage, Some(0.0));

    // A tracing field warden does not implement changes which requests are sampled: an
    // error at the field, with its line.
    let dir = std::env::temp_dir().join(format!("warden-tracing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let by_id = dir.join("by-request-id.yaml");
    let text =
        std::fs::read_to_string(&tracing).unwrap() + "    useRequestIdForTraceSampling: true\n";
    std::fs::write(&by_id, text).unwrap();
    let err = load_paths(std::slice::from_ref(&by_id)).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(err.errors.len(), 1, "{err}");
    let e = &err.errors[0];
    assert_eq!(
        (e.location.line, e.location.field.as_str()),
        (Some(10), "spec.tracing[0].useRequestIdForTraceSampling"),
        "{err}"
    );
}

#[test]
fn a_namespace_with_one_dangling_virtual_service_loads_everything_else() {
    let dir = std::env::temp_dir().join(format!("warden-samples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A route added to a namespace whose service is not deployed (yet).
    let extra = dir.join("zz-ratings-canary.yaml");
    std::fs::write(
        &extra,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: canary}\n\
         spec:\n  hosts: [ratings]\n  http:\n  - route:\n    - destination: {host: ratings-canary}\n",
    )
    .unwrap();
    let paths = [
        fixture("samples-bookinfo-platform.yaml"),
        fixture("samples-bookinfo-gateway.yaml"),
        fixture("samples-bookinfo-destination-rule-all.yaml"),
        fixture("samples-bookinfo-virtual-service-all-v1.yaml"),
        extra.clone(),
    ];
    let loaded = load_paths(&paths).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let set = &loaded.set;
    assert_eq!(set.virtual_services.len(), 6);
    let dangling: Vec<(&str, &str, &str)> = set
        .dangling
        .iter()
        .map(|d| (d.name.as_str(), d.field.as_str(), d.host.as_str()))
        .collect();
    assert_eq!(
        dangling,
        [(
            "canary",
            "spec.http[0].route[0].destination",
            "ratings-canary"
        )]
    );
    for vs in set
        .virtual_services
        .iter()
        .filter(|v| v.metadata.name != "canary")
    {
        assert_eq!(set.dangling_of(vs).count(), 0, "{}", vs.id());
    }
}
