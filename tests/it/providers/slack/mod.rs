pub mod socket;
