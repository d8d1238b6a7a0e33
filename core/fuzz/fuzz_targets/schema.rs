//! The schema the fuzz targets walk bodies with: `dissectors.schema.APIS` written as JSON by
//! `tests/schema_json.py`, its path in `KWS_FIGURES_SCHEMA` (`tests/fuzz_core.sh` sets it).

use kws_core::figures::{ApiDef, FieldDef, Nested};
use kws_core::kafka::ApiTable;
use serde_json::Value as Json;

pub const SCHEMA_VAR: &str = "KWS_FIGURES_SCHEMA";

/// The schema as read: its JSON (the consumer protocol's fields too), the APIs, and the
/// request header versions as the pipeline's table has them.
pub struct Schema {
    #[allow(dead_code)] // (the pair target reads the APIs alone)
    pub json: Json,
    pub apis: Vec<ApiDef>,
    pub table: ApiTable,
}

fn range(v: &Json) -> Option<(i32, i32)> {
    let a = v.as_array()?;
    Some((a[0].as_i64()? as i32, a[1].as_i64()? as i32))
}

fn string(v: &Json) -> Option<String> {
    v.as_str().map(str::to_string)
}

pub fn field(v: &Json) -> FieldDef {
    FieldDef {
        name: string(&v["name"]).expect("field name"),
        ty: string(&v["type"]).expect("field type"),
        versions: range(&v["versions"]).expect("field versions"),
        nullable: range(&v["nullable"]),
        tag: v["tag"].as_i64(),
        tagged: range(&v["tagged"]),
        struct_name: string(&v["struct"]),
        element: string(&v["element"]),
        fields: v["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(field)
            .collect(),
        error_meaning: v["meaning"].as_str() == Some("error_code"),
        nested: match v["meaning"].as_str() {
            Some("consumer_subscription") => Some(Nested::Subscription),
            Some("consumer_assignment") => Some(Nested::Assignment),
            _ => None,
        },
    }
}

fn api(v: &Json) -> ApiDef {
    let fields = |k: &str| {
        v[k].as_array()
            .expect("request/response")
            .iter()
            .map(field)
            .collect()
    };
    let i16_of = |k: &str| v[k].as_i64().map(|x| i16::try_from(x).expect("an i16"));
    ApiDef {
        key: i16_of("key").expect("key"),
        name: string(&v["name"]).expect("name"),
        min_version: i16_of("min_version").expect("min_version"),
        max_version: i16_of("max_version").expect("max_version"),
        flexible_from: i16_of("flexible_from"),
        request: fields("request"),
        response: fields("response"),
    }
}

/// The schema of `KWS_FIGURES_SCHEMA`, or None when it is not set.
pub fn load() -> Option<Schema> {
    let path = std::env::var(SCHEMA_VAR).ok()?;
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{SCHEMA_VAR}={path}: {e}"));
    let json: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut apis: Vec<ApiDef> = json["apis"]
        .as_array()
        .expect("a list of APIs")
        .iter()
        .map(api)
        .collect();
    apis.sort_by_key(|a| a.key);
    assert!(!apis.is_empty(), "{path}: no APIs");
    // the pipeline's own header table (`dissectors.header.api_table`)
    let table: Vec<(i16, i16, i16, Vec<u8>)> =
        serde_json::from_value(json["header_table"].clone()).expect("a header table");
    let table = ApiTable::new(table).expect("a valid header table");
    Some(Schema { json, apis, table })
}
