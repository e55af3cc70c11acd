//! fio's JSON writer (json.c `json_print_object`): objects keep insertion order,
//! `"key" : value` pairs, two spaces per level, integers as `%lld`, floats as `%f`
//! (six decimals), strings with `\` and `"` escaped, so a report's bytes are what
//! fio 3.33 writes for the same values.

use std::fmt::Write as _;

/// A JSON value as fio builds it.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonValue {
    /// An integer (`%lld`).
    Int(i64),
    /// A float (`%f`).
    Float(f64),
    /// A string.
    Str(String),
    /// An object, keys in insertion order.
    Object(Vec<(String, JsonValue)>),
    /// An array.
    Array(Vec<JsonValue>),
}

impl JsonValue {
    /// An empty object.
    pub fn object() -> Self {
        JsonValue::Object(Vec::new())
    }

    /// Appends `key: value` to an object (no effect on other values).
    pub fn push(&mut self, key: &str, value: impl Into<JsonValue>) -> &mut Self {
        if let JsonValue::Object(pairs) = self {
            pairs.push((key.to_string(), value.into()));
        }
        self
    }

    /// The value of `key` in an object.
    pub fn get(&self, key: &str) -> Option<&JsonValue> {
        match self {
            JsonValue::Object(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value as fio prints it, from level 0 (a whole document, without fio's
    /// trailing newline).
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, level: usize) {
        let indent = |out: &mut String, l: usize| {
            for _ in 0..l {
                out.push_str("  ");
            }
        };
        match self {
            JsonValue::Int(i) => {
                let _ = write!(out, "{i}");
            }
            JsonValue::Float(f) => {
                let f = if f.is_finite() { *f } else { 0.0 };
                let _ = write!(out, "{f:.6}");
            }
            JsonValue::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    if c == '\\' || c == '"' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
            JsonValue::Object(pairs) => {
                out.push_str("{\n");
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    indent(out, level + 1);
                    JsonValue::Str(k.clone()).write(out, 0);
                    out.push_str(" : ");
                    v.write(out, level + 1);
                }
                out.push('\n');
                indent(out, level);
                out.push('}');
            }
            JsonValue::Array(items) => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    indent(out, level + 1);
                    v.write(out, level + 1);
                }
                out.push('\n');
                indent(out, level);
                out.push(']');
            }
        }
    }

    /// A `serde_json` value in fio's form (numbers that are integers stay integers).
    pub fn from_serde(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => JsonValue::Str("null".into()),
            serde_json::Value::Bool(b) => JsonValue::Int(i64::from(*b)),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => JsonValue::Int(i),
                None => JsonValue::Float(n.as_f64().unwrap_or(0.0)),
            },
            serde_json::Value::String(s) => JsonValue::Str(s.clone()),
            serde_json::Value::Array(a) => {
                JsonValue::Array(a.iter().map(Self::from_serde).collect())
            }
            serde_json::Value::Object(m) => JsonValue::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), Self::from_serde(v)))
                    .collect(),
            ),
        }
    }
}

impl From<u64> for JsonValue {
    fn from(v: u64) -> Self {
        JsonValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<i64> for JsonValue {
    fn from(v: i64) -> Self {
        JsonValue::Int(v)
    }
}
impl From<i32> for JsonValue {
    fn from(v: i32) -> Self {
        JsonValue::Int(i64::from(v))
    }
}
impl From<u32> for JsonValue {
    fn from(v: u32) -> Self {
        JsonValue::Int(i64::from(v))
    }
}
impl From<f64> for JsonValue {
    fn from(v: f64) -> Self {
        JsonValue::Float(v)
    }
}
impl From<&str> for JsonValue {
    fn from(v: &str) -> Self {
        JsonValue::Str(v.to_string())
    }
}
impl From<String> for JsonValue {
    fn from(v: String) -> Self {
        JsonValue::Str(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_fios() {
        let mut job = JsonValue::object();
        job.push("jobname", "t")
            .push("iops", 42547.226387)
            .push("N", 3u64);
        let mut root = JsonValue::object();
        root.push("fio version", "fio-3.33")
            .push("jobs", JsonValue::Array(vec![job]))
            .push("q", "a \"b\" \\c");
        assert_eq!(
            root.render(),
            "{\n  \"fio version\" : \"fio-3.33\",\n  \"jobs\" : [\n    {\n      \"jobname\" : \"t\",\n      \"iops\" : 42547.226387,\n      \"N\" : 3\n    }\n  ],\n  \"q\" : \"a \\\"b\\\" \\\\c\"\n}"
        );
        // What fio printed for a job's percentile (two levels deeper).
        let mut p = JsonValue::object();
        p.push("1.000000", 70u64);
        let mut c = JsonValue::object();
        c.push("percentile", p);
        assert_eq!(
            c.render(),
            "{\n  \"percentile\" : {\n    \"1.000000\" : 70\n  }\n}"
        );
        assert_eq!(JsonValue::Float(100.0).render(), "100.000000");
    }

    #[test]
    fn the_output_is_json_serde_reads() {
        let mut root = JsonValue::object();
        root.push("a", 1.5)
            .push("b", JsonValue::Array(vec![1u64.into(), "x".into()]));
        let v: serde_json::Value = serde_json::from_str(&root.render()).unwrap();
        assert_eq!(v["a"], 1.5);
        assert_eq!(v["b"][1], "x");
        assert_eq!(JsonValue::from_serde(&v), root);
    }
}
