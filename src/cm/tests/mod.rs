mod fake;
mod layout;
mod machine;
