"""Dashboard pages; each module is a Streamlit page script run by st.navigation."""
