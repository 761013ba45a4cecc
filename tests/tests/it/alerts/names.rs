//! What a Prometheus scrape of csivol-server exports (metric names and label sets), and
//! what a PromQL expression, a rule or a dashboard panel uses of it: just enough of the
//! exposition format and of PromQL to hold the shipped rules and dashboard to the server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

/// One series: its labels.
pub type Labels = BTreeMap<String, String>;

/// The labels a scrape adds to every series (they are not the server's).
pub const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// Sample names (`csivol_claims`, `csivol_claim_ready_seconds_bucket`, …) and their series.
#[derive(Debug, Default)]
pub struct Exported {
    pub series: BTreeMap<String, Vec<Labels>>,
}

impl Exported {
    /// Adds the samples of one Prometheus text exposition.
    pub fn add(&mut self, text: &str) {
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (name, labels) =
                series(line).unwrap_or_else(|| panic!("unreadable sample: {line}"));
            let all = self.series.entry(name).or_default();
            if !all.contains(&labels) {
                all.push(labels);
            }
        }
    }

    /// Every label name a metric's series carry.
    pub fn label_names(&self, metric: &str) -> BTreeSet<String> {
        self.series
            .get(metric)
            .into_iter()
            .flatten()
            .flat_map(|l| l.keys().cloned())
            .collect()
    }

    /// Whether some series of `metric` has `label` = `value`.
    pub fn has_value(&self, metric: &str, label: &str, value: &str) -> bool {
        self.series
            .get(metric)
            .into_iter()
            .flatten()
            .any(|l| l.get(label).is_some_and(|v| v == value))
    }
}

/// A series as written in the exposition or in a promtool test: `name{k="v",…}` and, in
/// the exposition, its value after it.
pub fn series(text: &str) -> Option<(String, Labels)> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let name = text[..end].to_owned();
    let mut labels = Labels::new();
    let mut rest = text[end..].chars().peekable();
    if rest.peek() == Some(&'{') {
        rest.next();
        loop {
            let key: String = rest
                .by_ref()
                .skip_while(|c| *c == ',' || c.is_whitespace())
                .take_while(|c| *c != '=')
                .collect();
            if key.trim().is_empty() || key.contains('}') {
                break;
            }
            if rest.next() != Some('"') {
                return None;
            }
            let mut value = String::new();
            loop {
                match rest.next()? {
                    '\\' => value.push(rest.next()?),
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.insert(key.trim().to_owned(), value);
            match rest.peek() {
                Some('}') => {
                    rest.next();
                    break;
                }
                Some(',') => {}
                _ => return None,
            }
        }
    }
    (!name.is_empty()).then_some((name, labels))
}

/// A label matcher written on a selector: label, operator, value.
pub type Matcher = (String, String, String);

/// What one expression (with its legend or annotations) uses.
#[derive(Debug, Default)]
pub struct Uses {
    /// Metric names with the matchers written on them: (label, operator, value).
    pub selectors: Vec<(String, Vec<Matcher>)>,
    /// Recording rules' names (`csivol:…`).
    pub records: BTreeSet<String>,
    /// Labels named in `by`, `without`, `on`, `ignoring`, legends and annotations, which
    /// must come from one of the expression's metrics.
    pub labels: BTreeSet<String>,
}

static SELECTOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^A-Za-z0-9_:])(csivol_[a-z0-9_]+)\s*(\{[^}]*\})?").unwrap()
});
static MATCHER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)""#).unwrap());
static RECORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"csivol:[a-z0-9_:]+").unwrap());
static GROUPING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)").unwrap()
});
static TEMPLATE_LABEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\{\{\s*(?:\$labels\.)?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}|\$labels\.([A-Za-z_][A-Za-z0-9_]*)",
    )
    .unwrap()
});

impl Uses {
    /// What `text` (an expression, and the legends or annotations shown with it) uses.
    pub fn of(text: &str) -> Self {
        let mut u = Self::default();
        for cap in SELECTOR.captures_iter(text) {
            let matchers = cap.get(2).map_or_else(Vec::new, |m| {
                MATCHER
                    .captures_iter(m.as_str())
                    .map(|c| (c[1].to_owned(), c[2].to_owned(), c[3].to_owned()))
                    .collect()
            });
            u.selectors.push((cap[1].to_owned(), matchers));
        }
        u.records = RECORD
            .find_iter(text)
            .map(|m| m.as_str().to_owned())
            .collect();
        for cap in GROUPING.captures_iter(text) {
            u.labels.extend(
                cap[1]
                    .split(',')
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned),
            );
        }
        for cap in TEMPLATE_LABEL.captures_iter(text) {
            let l = cap.get(1).or(cap.get(2)).unwrap().as_str();
            // `{{ $value }}` and Grafana's own `{{__name__}}` are no labels of a series.
            if l != "value" && !l.starts_with("__") {
                u.labels.insert(l.to_owned());
            }
        }
        u
    }

    /// What of this is not exported: unknown metrics, labels no series of the metric has,
    /// matched values no series has, grouping or legend labels none of the metrics has
    /// (judged only when every metric is known).
    /// `records` gives, per recording rule, what its expression uses.
    pub fn missing(
        &self,
        exported: &Exported,
        records: &BTreeMap<String, Uses>,
        problems: &mut BTreeSet<String>,
    ) {
        let mut labels = BTreeSet::new();
        // The labels of an expression one of whose metrics is missing cannot be judged:
        // the missing metric is the problem named.
        let mut complete = true;
        for (metric, matchers) in &self.selectors {
            if !exported.series.contains_key(metric) {
                problems.insert(format!("metric {metric}"));
                complete = false;
                continue;
            }
            let names = exported.label_names(metric);
            for (label, op, value) in matchers {
                if !names.contains(label) {
                    problems.insert(format!("label `{label}` of {metric}"));
                } else if op == "=" && !exported.has_value(metric, label, value) {
                    problems.insert(format!("{metric}{{{label}=\"{value}\"}}"));
                }
            }
            labels.extend(names);
        }
        for r in &self.records {
            match records.get(r) {
                None => {
                    problems.insert(format!("recording rule {r}"));
                }
                Some(used) => {
                    for (metric, _) in &used.selectors {
                        complete &= exported.series.contains_key(metric);
                        labels.extend(exported.label_names(metric));
                    }
                }
            }
        }
        if !complete {
            return;
        }
        for l in &self.labels {
            if !labels.contains(l) {
                problems.insert(format!(
                    "label `{l}` (of none of {:?})",
                    self.selectors
                        .iter()
                        .map(|(m, _)| m.as_str())
                        .chain(self.records.iter().map(String::as_str))
                        .collect::<BTreeSet<_>>()
                ));
            }
        }
    }
}

/// The rules of a Prometheus rule file by the line that starts them (`- record: NAME` or
/// `- alert: NAME`): (`record` or `alert`, name, the rule's text without comments).
pub fn rules(file: &str) -> Vec<(String, String, String)> {
    let start = Regex::new(r"^\s*- (record|alert):\s*(\S+)").unwrap();
    let mut out: Vec<(String, String, String)> = Vec::new();
    for line in file.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(c) = start.captures(line) {
            out.push((c[1].to_owned(), c[2].to_owned(), String::new()));
        } else if let Some((_, _, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

#[test]
fn series_are_read_as_the_exposition_and_promtool_write_them() {
    let (name, labels) = series(r#"csivol_x_bucket{le="+Inf",state="a \"b\", c"} 1.0"#).unwrap();
    assert_eq!(name, "csivol_x_bucket");
    assert_eq!(labels["le"], "+Inf");
    assert_eq!(labels["state"], "a \"b\", c");
    assert_eq!(
        series("csivol_y 0").unwrap(),
        ("csivol_y".into(), Labels::new())
    );
    let u = Uses::of(
        "max by (volume, node) (csivol_a{state=\"lost\"}) / csivol:b:ratio > 0 {{ $labels.plugin }}",
    );
    assert_eq!(u.selectors[0].0, "csivol_a");
    assert_eq!(
        u.selectors[0].1,
        [("state".into(), "=".into(), "lost".into())]
    );
    assert!(u.records.contains("csivol:b:ratio"));
    assert_eq!(
        u.labels.iter().map(String::as_str).collect::<Vec<_>>(),
        ["node", "plugin", "volume"]
    );
}
