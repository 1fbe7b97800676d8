mod fake;
mod fuzz;
mod hostile;
mod layout;
mod machine;
