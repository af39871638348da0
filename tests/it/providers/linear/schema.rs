//! Linear's published GraphQL schema (`schemas/linear/schema.graphql`), parsed once, and the checks the fake
//! Linear and the contract tests hold pidevops's operations to: an operation validates against the schema (fields,
//! arguments, types), its variables coerce to the input types it declares (an input field Linear does not have, or
//! a missing required one, is refused), and an answer fits the operation's selection (every selected field, no
//! other, of its type; non-null never null; an enum one of its values).

use std::sync::LazyLock;

use apollo_compiler::executable::{Selection, SelectionSet};
use apollo_compiler::schema::{ExtendedType, Type};
use apollo_compiler::validation::Valid;
use apollo_compiler::{ExecutableDocument, Schema};
use serde_json::Value;

pub static SCHEMA: LazyLock<Valid<Schema>> = LazyLock::new(|| {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/linear/schema.graphql");
    let sdl = std::fs::read_to_string(path).expect("Linear's schema is in the repository");
    Schema::parse_and_validate(sdl, path).expect("Linear's schema is valid GraphQL")
});

/// The operation in `query`, validated against Linear's schema; `Err` says why not, as Linear's validation would.
pub fn validate(query: &str) -> Result<Valid<ExecutableDocument>, String> {
    ExecutableDocument::parse_and_validate(&SCHEMA, query, "operation.graphql")
        .map_err(|errors| errors.errors.to_string())
}

/// Validates `query` and coerces `variables` to the types its single operation declares.
pub fn validate_request(
    query: &str,
    variables: &Value,
) -> Result<Valid<ExecutableDocument>, String> {
    let document = validate(query)?;
    let operation = document
        .operations
        .get(None)
        .map_err(|e| e.message().to_string())?;
    let values: apollo_compiler::response::JsonMap = match variables {
        Value::Null => Default::default(),
        other => serde_json::from_value(other.clone()).map_err(|e| format!("variables: {e}"))?,
    };
    apollo_compiler::request::coerce_variable_values(&SCHEMA, operation, &values)
        .map_err(|e| format!("variables: {}", e.message()))?;
    Ok(document)
}

/// Whether `data` fits the selection of `document`'s operation.
pub fn fits(document: &ExecutableDocument, data: &Value) -> Result<(), String> {
    let operation = document
        .operations
        .get(None)
        .map_err(|e| e.message().to_string())?;
    fits_selection(&operation.selection_set, data, "data")
}

fn fits_selection(selection: &SelectionSet, value: &Value, at: &str) -> Result<(), String> {
    let Value::Object(object) = value else {
        return Err(format!(
            "{at}: expected an object of {}, got {value}",
            selection.ty
        ));
    };
    let mut expected = Vec::new();
    for item in &selection.selections {
        let Selection::Field(field) = item else {
            return Err(format!("{at}: fragments are not used by pidevops"));
        };
        let key = field.response_key().as_str();
        expected.push(key);
        let path = format!("{at}.{key}");
        let field_value = object
            .get(key)
            .ok_or_else(|| format!("{path}: selected but missing"))?;
        fits_type(field.ty(), &field.selection_set, field_value, &path)?;
    }
    if let Some(extra) = object.keys().find(|k| !expected.contains(&k.as_str())) {
        return Err(format!("{at}.{extra}: answered but not selected"));
    }
    Ok(())
}

fn fits_type(ty: &Type, selection: &SelectionSet, value: &Value, at: &str) -> Result<(), String> {
    if value.is_null() {
        return if ty.is_non_null() {
            Err(format!("{at}: null for the non-null {ty}"))
        } else {
            Ok(())
        };
    }
    if ty.is_list() {
        let Value::Array(items) = value else {
            return Err(format!("{at}: expected a list {ty}, got {value}"));
        };
        for (i, item) in items.iter().enumerate() {
            fits_type(ty.item_type(), selection, item, &format!("{at}[{i}]"))?;
        }
        return Ok(());
    }
    let name = ty.inner_named_type();
    match SCHEMA.types.get(name) {
        Some(ExtendedType::Object(_) | ExtendedType::Interface(_) | ExtendedType::Union(_)) => {
            fits_selection(selection, value, at)
        }
        Some(ExtendedType::Enum(enumeration)) => match value.as_str() {
            Some(v) if enumeration.values.keys().any(|k| k.as_str() == v) => Ok(()),
            _ => Err(format!("{at}: {value} is not a value of the enum {name}")),
        },
        Some(ExtendedType::Scalar(_)) => {
            let ok = match name.as_str() {
                "String" | "ID" => value.is_string(),
                "Int" => value.is_i64() || value.is_u64(),
                "Float" => value.is_number(),
                "Boolean" => value.is_boolean(),
                "DateTime" | "TimelessDate" => value.is_string(),
                "JSONObject" => value.is_object(),
                _ => true,
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{at}: {value} is not a {name}"))
            }
        }
        _ => Err(format!("{at}: {name} is not an output type")),
    }
}
