//! The idempotency keys of `IdempotencyKey::v5` are the ones the TypeScript
//! client's `keyFor` derives: both check the same vectors
//! (`clients/typescript/packages/client/test/key-vectors.json`), so a
//! service in either language makes the same key for the same user action.

use ballast::{IdempotencyKey, KEY_NAMESPACE};
use serde_json::Value;

const VECTORS: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript/packages/client/test/key-vectors.json");

#[test]
fn v5_keys_match_the_shared_vectors() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    let file: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(file["namespace"], KEY_NAMESPACE.to_string(), "the file's namespace is ballast's");
    let vectors = file["vectors"].as_array().expect("a `vectors` array");
    assert!(vectors.len() >= 10, "{} vectors", vectors.len());
    let field = |vector: &Value, name: &str| {
        vector[name].as_str().unwrap_or_else(|| panic!("{name} in {vector}")).to_owned()
    };
    let wrong: Vec<String> = vectors
        .iter()
        .filter_map(|vector| {
            let (name, operation, key) =
                (field(vector, "name"), field(vector, "operation"), field(vector, "key"));
            let ours = IdempotencyKey::v5(name.as_str(), &operation).to_string();
            (ours != key).then(|| format!("v5({name:?}, {operation:?}) = {ours}, the file says {key}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_integer_id_gives_the_key_of_its_digits() {
    // keyFor(42, …) in TypeScript writes the number as these digits too.
    assert_eq!(IdempotencyKey::v5(42, "register-payment"), IdempotencyKey::v5("42", "register-payment"));
}
