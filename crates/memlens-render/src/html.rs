//! What every self-contained HTML page needs: text escaped for HTML, and data embedded in a
//! `<script>` element without ending it early. The pages themselves: [`crate::doc::Document`] (a
//! measuring command's report) and `memlens report --html` (memlens-profile).

/// Escape `&`, `<`, `>` and `"` for HTML text and attributes.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JSON text made safe inside `<script type="application/json">`: `</` (which would end the
/// element, e.g. in a function named `</script>`) and `<!--` are written with `\/` and `\u003c`,
/// which JSON reads back as the same characters.
pub fn script_json(json: &str) -> String {
    json.replace("</", "<\\/").replace("<!--", "\\u003c!--")
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_json_cannot_end_its_script() {
        let j = serde_json::json!({ "f": "a</script><!--b" }).to_string();
        let s = super::script_json(&j);
        assert!(!s.contains("</") && !s.contains("<!--"), "{s}");
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back["f"], "a</script><!--b");
        assert_eq!(super::escape("a<b&\""), "a&lt;b&amp;&quot;");
    }
}
