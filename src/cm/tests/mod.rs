mod layout;
