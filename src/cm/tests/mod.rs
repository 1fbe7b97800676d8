mod fake;
mod fuzz;
mod layout;
mod machine;
