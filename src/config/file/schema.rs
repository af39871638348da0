//! Each table's keys, from serde itself (for the documentation test and `config check`).

use super::*;

/// The keys a struct accepts: the field list serde hands to `deserialize_struct`, caught by a deserializer that
/// does nothing else.
pub fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe;
    #[derive(Debug)]
    struct Fields(&'static [&'static str]);
    impl fmt::Display for Fields {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a probe for field names")
        }
    }
    impl std::error::Error for Fields {}
    impl de::Error for Fields {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Fields(&[])
        }
    }
    impl<'de> Deserializer<'de> for Probe {
        type Error = Fields;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
            Err(Fields(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Fields> {
            Err(Fields(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(Fields(fields)) => fields,
        Ok(_) => &[],
    }
}

/// Every table of the file: its header as written in the docs, and its keys (sub-tables excluded; they are
/// tables of their own). `docs/configuration.md` documents exactly these.
pub fn schema() -> Vec<(&'static str, Vec<&'static str>)> {
    let without = |keys: &'static [&'static str], tables: &[&str]| -> Vec<&'static str> {
        keys.iter()
            .copied()
            .filter(|k| !tables.contains(k))
            .collect()
    };
    vec![
        ("[board]", keys_of::<BoardTable>().to_vec()),
        ("[repos.\"owner/name\"]", keys_of::<RepoTable>().to_vec()),
        (
            "[intake]",
            without(keys_of::<IntakeTable>(), &["github", "linear", "gitlab"]),
        ),
        ("[intake.github]", keys_of::<IntakeGithubTable>().to_vec()),
        ("[intake.gitlab]", keys_of::<IntakeGitlabTable>().to_vec()),
        (
            "[intake.linear]",
            without(keys_of::<IntakeLinearTable>(), &["teams"]),
        ),
        ("[dispatch]", keys_of::<DispatchTable>().to_vec()),
        ("[agents.<name>]", keys_of::<AgentTable>().to_vec()),
        (
            "[[schedules]]",
            without(keys_of::<ScheduleTable>(), &["task"]),
        ),
        ("[schedules.task]", keys_of::<ScheduleTaskTable>().to_vec()),
        ("[digest]", keys_of::<DigestTable>().to_vec()),
        ("[linear.states]", keys_of::<LinearStatesTable>().to_vec()),
        ("[telegram]", keys_of::<TelegramTable>().to_vec()),
        (
            "[slack.channels.<id>]",
            keys_of::<SlackChannelTable>().to_vec(),
        ),
        ("[effects]", keys_of::<EffectsTable>().to_vec()),
        ("[pollers.<name>]", keys_of::<PollerTable>().to_vec()),
        ("[loops.<name>]", keys_of::<LoopTable>().to_vec()),
        ("[plans]", keys_of::<PlansTable>().to_vec()),
        ("[budgets]", keys_of::<BudgetsTable>().to_vec()),
    ]
}
