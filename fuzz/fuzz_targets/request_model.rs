//! `meter::request_model` on any request body: never panics, and agrees
//! with serde_json on every body serde_json reads: `None` for anything but
//! an object; for an object, its top-level `model` members read in order,
//! a string (cut to `MODEL_MAX_CHARS`) or `null` replacing the one before,
//! and any other value making it `None` (whereas serde_json's `Value`
//! would keep the last member only).

#![no_main]

use std::fmt;

use libfuzzer_sys::fuzz_target;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use meter::{MODEL_MAX_CHARS, request_model};

/// The values of an object's `model` members, in order.
struct Models(Vec<Value>);

impl<'de> serde::Deserialize<'de> for Models {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Models;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Models, A::Error> {
                let mut models = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "model" {
                        models.push(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Models(models))
            }
        }
        d.deserialize_map(V)
    }
}

fuzz_target!(|data: &[u8]| {
    let ours = request_model(data);
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(_)) => {
            let Ok(Models(models)) = serde_json::from_slice::<Models>(data) else {
                panic!("serde_json read the object once, not twice");
            };
            let mut theirs = None;
            for model in models {
                theirs = match model {
                    Value::String(s) => Some(s.chars().take(MODEL_MAX_CHARS).collect::<String>()),
                    Value::Null => None,
                    _ => {
                        theirs = None;
                        break;
                    }
                };
            }
            assert_eq!(ours, theirs, "request_model disagrees with serde_json");
        }
        Ok(_) => assert_eq!(ours, None, "a model out of a body that is not an object"),
        Err(_) => {}
    }
});
