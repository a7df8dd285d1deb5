//! Which `lerian.streaming.<source>` topics an engine consumes (R-IN-1): every source, or the
//! ones an operator names, so separate engine deployments can serve separate sources (and so a
//! test's engine reads only its own topic while other tests create and delete theirs).

use hub_core::model::is_source;

/// The sources an engine ingests, and with them the `.dlq` topics it observes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SourceSelection {
    /// Every topic named `lerian.streaming.<source>`, as they appear.
    #[default]
    All,
    /// Only these sources (each a valid `<source>`, at least one).
    Only(Vec<String>),
}

impl SourceSelection {
    /// The ingest subscription (librdkafka treats a leading `^` as a regex).
    pub fn ingest_pattern(&self) -> String {
        format!(r"^lerian\.streaming\.{}$", self.alternatives())
    }

    /// The producers' dead-letter topics of the same sources (R-IN-9).
    pub fn dlq_pattern(&self) -> String {
        format!(r"^lerian\.streaming\.{}\.dlq$", self.alternatives())
    }

    fn alternatives(&self) -> String {
        match self {
            Self::All => "[a-z0-9][a-z0-9_-]*".into(),
            // A source has no regex metacharacter but `-`, which means nothing outside a class.
            Self::Only(sources) => format!("({})", sources.join("|")),
        }
    }
}

impl std::str::FromStr for SourceSelection {
    type Err = String;

    /// `*` (or nothing) for every source, else a comma-separated list of sources.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s == "*" {
            return Ok(Self::All);
        }
        let mut sources = Vec::new();
        for source in s.split(',').map(str::trim) {
            if !is_source(source) {
                return Err(format!(
                    "{source:?} is not a source (a lower-case letter or digit, then lower-case \
                     letters, digits, `_` and `-`)"
                ));
            }
            if !sources.iter().any(|known| known == source) {
                sources.push(source.to_owned());
            }
        }
        Ok(Self::Only(sources))
    }
}

impl<'de> serde::Deserialize<'de> for SourceSelection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, topic: &str) -> bool {
        regex::Regex::new(pattern).expect("pattern").is_match(topic)
    }

    #[test]
    fn r_in_1_every_source_by_default_and_never_a_dlq_topic_as_ingest() {
        let all = SourceSelection::All;
        assert!(matches(&all.ingest_pattern(), "lerian.streaming.lender"));
        assert!(!matches(
            &all.ingest_pattern(),
            "lerian.streaming.lender.dlq"
        ));
        assert!(matches(&all.dlq_pattern(), "lerian.streaming.lender.dlq"));
        assert_eq!("*".parse::<SourceSelection>(), Ok(SourceSelection::All));
    }

    #[test]
    fn r_in_1_named_sources_select_exactly_their_topics() {
        let some: SourceSelection = "lender, pix-out,lender".parse().expect("sources");
        assert_eq!(
            some,
            SourceSelection::Only(vec!["lender".into(), "pix-out".into()])
        );
        let ingest = some.ingest_pattern();
        assert!(matches(&ingest, "lerian.streaming.lender"));
        assert!(matches(&ingest, "lerian.streaming.pix-out"));
        assert!(!matches(&ingest, "lerian.streaming.lenders"));
        assert!(!matches(&ingest, "lerian.streaming.pix-out.dlq"));
        assert!(matches(&some.dlq_pattern(), "lerian.streaming.pix-out.dlq"));
        assert!(!matches(&some.dlq_pattern(), "lerian.streaming.other.dlq"));
    }

    #[test]
    fn r_in_1_a_name_that_is_not_a_source_is_refused() {
        for bad in ["Lender", "a.b", "lender,", "(x|y)", "-x"] {
            assert!(bad.parse::<SourceSelection>().is_err(), "{bad}");
        }
    }
}
